"""A step as both Mamba-2 backends see it, planned once per step per group.

The runner hands every group's builder the common batch metadata; the plan
below is what the impls need from it, computed once for all layers of the
group: the conv index, the decodes' slots, and each prefill's token range,
slot and whether it continues from saved state. Everything a Python loop
reads is a plain int here, so no layer synchronises with the device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from mixboard.metadata import CommonBatchMetadata
from mixboard.ops.causal_conv import ConvIndex
from mixboard.ops.checks import repeated, slot_bounds
from mixboard.ops.slots import consecutive


@dataclass(frozen=True)
class Prefill:
    start: int  # first token along the packed axis
    end: int  # one past its last token
    slot: int  # its state record
    continues: bool  # context_lens > 0: start from the saved state, not zeros


@dataclass
class Mamba2Step:
    common: CommonBatchMetadata
    conv_width: int
    conv: ConvIndex | None  # the ragged conv's index; None in a decode-only step, which needs none
    num_tokens: int
    num_decodes: int  # the first num_decodes tokens are one-token decodes
    decode_slots: torch.Tensor  # int64 [num_decodes], on the device
    decode_range: tuple[int, int] | None  # (first, stop) when those slots are consecutive: records in place
    prefills: tuple[Prefill, ...]
    slots_cpu: torch.Tensor  # every sequence's slot, host copy (checked against the pools)
    slot_bounds: tuple[int, int]  # their (min, max), for the per-layer range check
    duplicate_slot: int | None  # a slot two sequences of this step share (an error)


def plan_step(common: CommonBatchMetadata, conv_width: int) -> Mamba2Step:
    qsl = common.query_start_loc_cpu.tolist()
    ctx = common.context_lens_cpu.tolist()
    slots_cpu = common.state_slots_cpu
    slots = slots_cpu.tolist()
    nd = common.num_decodes
    prefills = tuple(Prefill(qsl[i], qsl[i + 1], slots[i], ctx[i] > 0) for i in range(nd, common.num_seqs))
    return Mamba2Step(
        common=common,
        conv_width=conv_width,
        conv=ConvIndex.build(common, conv_width) if nd < common.num_seqs else None,
        num_tokens=common.num_tokens,
        num_decodes=nd,
        decode_slots=common.state_slots[:nd].long(),
        decode_range=consecutive(slots[:nd]),
        prefills=prefills,
        slots_cpu=slots_cpu,
        slot_bounds=slot_bounds(slots),
        duplicate_slot=next(iter(repeated(slots)), None),
    )


def as_step(layer: str, meta: Any, spec: Any) -> Mamba2Step:
    """The builder's plan; the common metadata is planned here (the oracle's
    convention), anything else is an error that names the layer."""
    from mixboard.ops.checks import BackendInputError

    if isinstance(meta, Mamba2Step):
        if meta.conv_width != spec.d_conv:
            raise BackendInputError(f"{layer}: meta was planned for conv width {meta.conv_width}, "
                                    f"the layer's d_conv is {spec.d_conv} (use this backend's builder for the group)")
        return meta
    if isinstance(meta, CommonBatchMetadata):
        return plan_step(meta, spec.d_conv)
    raise BackendInputError(f"{layer}: meta must be what this backend's builder returns (or the step's "
                            f"CommonBatchMetadata), got {type(meta).__name__}")
