"""What both mamba1 backends need from a step's metadata, built once per step
per group (the backends' ``builder``) and shared by every layer of the group."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mixboard.metadata import CommonBatchMetadata
from mixboard.ops.causal_conv import ConvIndex
from mixboard.ops.checks import BackendInputError, repeated, slot_bounds
from mixboard.ops.slots import consecutive


@dataclass(frozen=True)
class Prefill:
    """One prefill sequence, in host ints: its tokens [start, end) and slot."""

    start: int
    end: int
    slot: int
    fresh: bool  # no context: starts from zero state whatever its slot holds


@dataclass
class Mamba1Meta:
    common: CommonBatchMetadata
    num_decodes: int
    decode_slots: torch.Tensor  # [num_decodes] int64 on the device: the decodes' slots
    decode_slots_i32: torch.Tensor  # the same, int32 (what the CUDA kernels take)
    slots_cpu: torch.Tensor  # [num_seqs] every sequence's slot, on the host (for checks)
    slot_bounds: tuple[int, int]  # their (min, max), for the per-layer range check
    prefills: tuple[Prefill, ...]
    conv_index: ConvIndex | None  # the ragged conv's index (mamba1_torch, batches with a prefill)
    repeated_slot: int | None  # a slot given to two sequences of the step, if any
    decode_range: tuple[int, int] | None  # (first, stop) when the decodes' slots are consecutive

    @property
    def num_tokens(self) -> int:
        return self.common.num_tokens

    @property
    def all_decodes(self) -> bool:
        return not self.prefills


def build_meta(common: CommonBatchMetadata, width: int, conv_index: bool = True) -> Mamba1Meta:
    nd = common.num_decodes
    qsl = common.query_start_loc_cpu.tolist()
    ctx = common.context_lens_cpu.tolist()
    slots_cpu = common.state_slots_cpu
    slots = slots_cpu.tolist()
    prefills = tuple(Prefill(qsl[i], qsl[i + 1], slots[i], ctx[i] == 0) for i in range(nd, common.num_seqs))
    decode_slots = common.state_slots[:nd]
    return Mamba1Meta(
        common=common,
        num_decodes=nd,
        decode_slots=decode_slots.long(),
        decode_slots_i32=decode_slots.to(torch.int32).contiguous(),
        slots_cpu=slots_cpu,
        slot_bounds=slot_bounds(slots),
        prefills=prefills,
        conv_index=ConvIndex.build(common, width) if conv_index and prefills else None,
        repeated_slot=next(iter(repeated(slots)), None),
        decode_range=consecutive(slots[:nd]),
    )


def as_meta(layer: str, meta, width: int, conv_index: bool = True) -> Mamba1Meta:
    """The builder's output; a plain CommonBatchMetadata (tests, the kit) is built on the spot."""
    if isinstance(meta, Mamba1Meta):
        return meta
    if isinstance(meta, CommonBatchMetadata):
        return build_meta(meta, width, conv_index)
    raise BackendInputError(f"{layer}: meta must be what the backend's builder returns (or a CommonBatchMetadata), "
                            f"got {type(meta).__name__}")
