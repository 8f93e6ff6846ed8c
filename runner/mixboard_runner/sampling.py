"""Sampling parameters and the sampler."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


from . import checks


@dataclass(frozen=True)
class SamplingParams:
    """max_tokens: new tokens at most. temperature 0 is greedy. top_k 0 and
    top_p 1.0 disable those filters. seed makes sampling reproducible per
    sequence. stop_token_ids end a sequence (the model's EOS does too unless
    ignore_eos)."""

    max_tokens: int = 16
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = field(default_factory=tuple)
    ignore_eos: bool = False

    def __post_init__(self):
        # checked when made, so that a request that is bad never reaches a step
        fields = {"max_tokens": checks.integer("max_tokens", self.max_tokens, 1),
                  "temperature": checks.real("temperature", self.temperature, 0.0),
                  "top_k": checks.integer("top_k", self.top_k, 0),
                  "top_p": checks.real("top_p", self.top_p, 0.0, 1.0, above=True),
                  "seed": None if self.seed is None else checks.integer("seed", self.seed, 0, 2**64 - 1),
                  "stop_token_ids": checks.token_ids("stop_token_ids", self.stop_token_ids),
                  "ignore_eos": checks.flag("ignore_eos", self.ignore_eos)}
        for name, value in fields.items():  # normalized: plain ints and floats, a tuple of ids
            object.__setattr__(self, name, value)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def sample(logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator | None],
           argmax=None) -> list[int]:
    """One token per row of ``logits`` [N, vocab]. ``argmax``: the op that picks a step's tokens when
    every row is greedy (the engine passes the model's, chosen by the plan); None: torch.argmax."""
    if all(p.greedy for p in params):
        return (logits.argmax(-1) if argmax is None else argmax(logits)).tolist()
    out = []
    for row, p, gen in zip(logits.float(), params, generators):
        if p.greedy:
            out.append(int(row.argmax()))
            continue
        row = row / p.temperature
        if p.top_k:
            kth = torch.topk(row, min(p.top_k, row.numel())).values[-1]
            row = row.masked_fill(row < kth, float("-inf"))
        probs = torch.softmax(row, -1)
        if p.top_p < 1.0:
            sorted_probs, order = probs.sort(descending=True)
            keep = sorted_probs.cumsum(0) - sorted_probs < p.top_p  # always keeps the most likely token
            probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_probs[keep])
        out.append(int(torch.multinomial(probs, 1, generator=gen)))
    return out
