"""A request moving through the engine."""

from __future__ import annotations

import itertools
from enum import Enum

import torch

from .sampling import SamplingParams

_ids = itertools.count()


class Status(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class Sequence:
    def __init__(self, prompt_ids: list[int], params: SamplingParams, *, forced_ids: list[int] | None = None):
        self.id = next(_ids)
        self.prompt_ids = list(prompt_ids)
        self.params = params
        self.tokens = list(prompt_ids)  # prompt, then generated (or forced) tokens
        self.num_computed = 0  # tokens whose effect is in the cache
        self.blocks: list[int] = []
        self.slot: int | None = None
        self.status = Status.WAITING
        self.finish_reason: str | None = None
        self.generator = torch.Generator().manual_seed(params.seed) if params.seed is not None else None

    @property
    def output_ids(self) -> list[int]:
        return self.tokens[len(self.prompt_ids):]

    @property
    def num_uncomputed(self) -> int:
        return len(self.tokens) - self.num_computed

    def __repr__(self) -> str:
        return f"Sequence(id={self.id}, tokens={len(self.tokens)}, computed={self.num_computed}, {self.status.value})"
