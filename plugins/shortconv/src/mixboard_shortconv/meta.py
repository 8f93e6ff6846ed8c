"""What both short_conv backends need per step, built once per step per group.

Everything here depends only on the step's metadata and the conv width, so
every layer of a group shares it: host-side facts for the input checks (so
that no layer synchronises with the device to check its slots), the slot
indices in the dtypes the kernels take, and the ragged-conv index.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mixboard.metadata import CommonBatchMetadata
from mixboard.ops.causal_conv import ConvIndex
from mixboard.ops.checks import repeated, slot_bounds
from mixboard.ops.slots import consecutive


@dataclass
class ShortConvMeta:
    common: CommonBatchMetadata
    num_tokens: int
    all_decode: bool  # every sequence is a decode: one token continuing from its slot
    slots: torch.Tensor  # int64 [N], for index_select / index_copy_
    slots_i32: torch.Tensor  # int32 [N], for causal-conv1d's conv_state_indices
    slots_cpu: torch.Tensor  # host copy, for the range check
    slot_bounds: tuple[int, int]  # the slots' (min, max), for the per-layer range check
    repeated_slots: tuple[int, ...]  # slots given to more than one sequence (an error at forward)
    conv_index: ConvIndex | None  # None for an all-decode step, whose path does not need it
    slot_range: tuple[int, int] | None = None  # (first, stop) when the slots are consecutive: records in place


def build_meta(common: CommonBatchMetadata, width: int) -> ShortConvMeta:
    if not isinstance(common, CommonBatchMetadata):
        raise TypeError(f"the short_conv builder takes the step's CommonBatchMetadata, not {type(common).__name__}")
    slots_cpu = common.state_slots_cpu
    values = slots_cpu.tolist()
    repeats = tuple(sorted(repeated(values)))
    all_decode = common.num_decodes == common.num_seqs  # an empty step too: nothing to convolve
    return ShortConvMeta(
        common=common,
        num_tokens=common.num_tokens,
        all_decode=all_decode,
        slots=common.state_slots.long(),
        slots_i32=common.state_slots.int(),
        slots_cpu=slots_cpu,
        slot_bounds=slot_bounds(values),
        repeated_slots=repeats,
        conv_index=None if all_decode else ConvIndex.build(common, width),
        slot_range=consecutive(values),
    )
