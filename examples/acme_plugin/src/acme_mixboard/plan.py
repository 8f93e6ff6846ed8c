"""The builder: the step's common metadata turned into a host-side plan,
once per step, shared by every attention layer of the model."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mixboard.metadata import CommonBatchMetadata


@dataclass(frozen=True)
class SeqPlan:
    start: int  # first row of the sequence's new tokens
    end: int
    context_len: int  # tokens already in the cache before this step
    seq_len: int
    blocks: tuple[int, ...]  # the blocks holding its seq_len tokens, in order


@dataclass(frozen=True)
class AcmePlan:
    num_tokens: int
    block_size: int
    slot_mapping: torch.Tensor  # int64 [T]: where each new token's k, v go (block * block_size + offset)
    seqs: tuple[SeqPlan, ...]
    block_range: tuple[int, int]  # smallest and largest block id the step touches (checked against the pool)


def build_plan(common: CommonBatchMetadata) -> AcmePlan:
    if not isinstance(common, CommonBatchMetadata):
        raise TypeError(f"acme_attn's builder takes the step's CommonBatchMetadata, not {type(common).__name__}")
    bs = common.block_size
    qsl = common.query_start_loc_cpu.tolist()
    ctx = common.context_lens_cpu.tolist()
    lens = common.seq_lens_cpu.tolist()
    table = common.block_table_cpu.tolist()  # the host copy: planning never waits for the device
    seqs = tuple(SeqPlan(qsl[i], qsl[i + 1], ctx[i], lens[i], tuple(table[i][: -(-lens[i] // bs)]))
                 for i in range(common.num_seqs))
    return AcmePlan(common.num_tokens, bs, common.slot_mapping.long(), seqs, common.block_range)
