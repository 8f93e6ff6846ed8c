"""What ``mamba2_triton``'s builder plans for a step: the common slot plan,
and which calls of mamba-ssm's chunked scan serve the prefills.

mamba-ssm 2.3's varlen scan packs sequences along one row (``seq_idx``,
``cu_seqlens``) but takes one initial state per *row*, and its per-sequence
final states (``return_varlen_states``) leave that initial state out when the
first sequence fits in one chunk. So runs of consecutive fresh prefills
(context 0) share one varlen call without initial states, and a prefill that
continues from saved state gets a call of its own with ``initial_states``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from mixboard.metadata import CommonBatchMetadata
from mixboard.ops.checks import BackendInputError
from mixboard.ops.slot_step import Prefill, SlotStep


@dataclass(frozen=True)
class ScanCall:
    start: int  # the call's tokens along the packed axis
    end: int
    slots: torch.Tensor  # int64 [n]: where each sequence's final state goes
    cu_seqlens: torch.Tensor | None  # int32 [n + 1], from 0: a varlen call of fresh sequences
    seq_idx: torch.Tensor | None  # int32 [1, end - start]: each token's sequence within the call
    initial_slot: int | None  # a continuing prefill: its saved state is the initial state


@dataclass
class TritonMeta:
    base: SlotStep
    scans: tuple[ScanCall, ...]


def _runs(prefills: tuple[Prefill, ...]) -> list[list[Prefill]]:
    runs: list[list[Prefill]] = []
    for p in prefills:
        if p.fresh and runs and runs[-1][0].fresh:
            runs[-1].append(p)
        else:
            runs.append([p])
    return runs


def _call(run: list[Prefill], device: torch.device) -> ScanCall:
    start, end = run[0].start, run[-1].end
    slots = torch.tensor([p.slot for p in run], dtype=torch.int64, device=device)
    if not run[0].fresh:
        return ScanCall(start, end, slots, None, None, run[0].slot)
    lens = torch.tensor([p.end - p.start for p in run], dtype=torch.int32)
    cu = torch.zeros(len(run) + 1, dtype=torch.int32)
    cu[1:] = lens.cumsum(0)
    seq_idx = torch.repeat_interleave(torch.arange(len(run), dtype=torch.int32), lens).view(1, -1)
    return ScanCall(start, end, slots, cu.to(device), seq_idx.to(device), None)


def build_meta(common: CommonBatchMetadata, conv_width: int) -> TritonMeta:
    base = SlotStep.plan(common, conv_width)
    device = common.state_slots.device
    return TritonMeta(base=base, scans=tuple(_call(run, device) for run in _runs(base.prefills)))


def as_meta(layer: str, meta: Any, spec: Any) -> TritonMeta:
    if isinstance(meta, TritonMeta):
        SlotStep.of(layer, meta.base, spec.d_conv)  # checks the conv width
        return meta
    if isinstance(meta, CommonBatchMetadata):
        return build_meta(meta, spec.d_conv)
    raise BackendInputError(f"{layer}: meta must be what this backend's builder returns (or the step's "
                            f"CommonBatchMetadata), got {type(meta).__name__}")
