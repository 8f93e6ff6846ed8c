"""A step as the backends of a kind with state in slots see it (mamba1,
mamba2, short_conv), planned once per step per group.

The runner hands every group's builder the step's common batch metadata;
``SlotStep.plan`` works out from it what the impls need, once for every
layer of the group: the decodes' slots (and whether they are consecutive,
so that their records are read and written in place), each prefill's rows,
slot and whether it starts fresh, the host-side facts the input checks
read, and the ragged conv's index. Everything a Python loop reads is a
plain int, so no layer synchronises with the device to plan. The device
tensors are made on first use and then shared by the group: a backend that
never reads one never pays for it.

A backend's builder is ``partial(SlotStep.plan, conv_width=...)``; its impl
takes ``SlotStep.of(layer, meta, conv_width)``, which also plans a plain
``CommonBatchMetadata`` on the spot (the oracle's convention) and refuses
anything else naming the layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch

from ..metadata import CommonBatchMetadata
from .causal_conv import ConvIndex
from .checks import BackendInputError, expect_slots, repeated, slot_bounds
from .slots import consecutive


@dataclass(frozen=True)
class Prefill:
    """One prefill of the step, in host ints."""

    start: int  # its first row along the packed axis
    end: int  # one past its last row
    slot: int  # its state record
    fresh: bool  # no context: starts from zero state, whatever its record holds


@dataclass
class SlotStep:
    common: CommonBatchMetadata
    conv_width: int  # the window of the conv the group's layers share (their spec's)
    num_tokens: int
    num_decodes: int  # the first num_decodes rows are one-token decodes, one per sequence
    decode_range: tuple[int, int] | None  # (first, stop) when the decodes' slots are consecutive: records in place
    prefills: tuple[Prefill, ...]
    slots_cpu: torch.Tensor  # every sequence's slot, the host copy (for the checks)
    slot_bounds: tuple[int, int]  # their (min, max): the per-layer range check compares two ints
    repeated_slots: tuple[int, ...]  # slots given to more than one sequence: an error at forward

    @classmethod
    def plan(cls, common: CommonBatchMetadata, conv_width: int) -> "SlotStep":
        if not isinstance(common, CommonBatchMetadata):
            raise TypeError(f"a slot-state builder takes the step's CommonBatchMetadata, not {type(common).__name__}")
        nd = common.num_decodes
        slots = common.state_slots_cpu.tolist()
        prefills: tuple[Prefill, ...] = ()
        if nd < common.num_seqs:  # a step of decodes only, the most frequent, reads no offsets or contexts
            starts, contexts = common.query_start_loc_cpu.tolist(), common.context_lens_cpu.tolist()
            prefills = tuple(Prefill(starts[i], starts[i + 1], slots[i], contexts[i] == 0)
                             for i in range(nd, common.num_seqs))
        return cls(
            common=common,
            conv_width=conv_width,
            num_tokens=common.num_tokens,
            num_decodes=nd,
            decode_range=consecutive(slots[:nd]),
            prefills=prefills,
            slots_cpu=common.state_slots_cpu,
            slot_bounds=slot_bounds(slots),
            repeated_slots=repeated(slots),
        )

    @classmethod
    def of(cls, layer: str, meta: Any, conv_width: int) -> "SlotStep":
        """The builder's plan for a layer whose conv is ``conv_width`` wide; the
        common metadata is planned here; anything else is an error naming the layer."""
        if isinstance(meta, cls):
            if meta.conv_width != conv_width:
                raise BackendInputError(f"{layer}: meta was planned for conv width {meta.conv_width}, the layer's "
                                        f"is {conv_width} (use this backend's builder for the group)")
            return meta
        if isinstance(meta, CommonBatchMetadata):
            return cls.plan(meta, conv_width)
        raise BackendInputError(f"{layer}: meta must be what this backend's builder returns (or the step's "
                                f"CommonBatchMetadata), got {type(meta).__name__}")

    @property
    def all_decodes(self) -> bool:
        return not self.prefills

    @cached_property
    def decode_slots(self) -> torch.Tensor:
        """int64 [num_decodes] on the device: for index_select, index_copy_ and SlotRecords."""
        return self._decodes_of(self.common.state_slots).long()

    @cached_property
    def decode_slots_i32(self) -> torch.Tensor:
        """int32 [num_decodes] on the device: the state indices CUDA kernels take
        (causal-conv1d's conv_state_indices, mamba-ssm's state_batch_indices)."""
        return self._decodes_of(self.common.state_slots).to(torch.int32).contiguous()

    @cached_property
    def conv_index(self) -> ConvIndex | None:
        """The ragged conv's index; None in a step of decodes only, which convolves one window per sequence."""
        return None if self.all_decodes else ConvIndex.build(self.common, self.conv_width)

    def _decodes_of(self, per_sequence: torch.Tensor) -> torch.Tensor:
        # a step of decodes only, the most frequent, needs no slice
        return per_sequence if self.all_decodes else per_sequence[:self.num_decodes]

    def check_slots(self, layer: str, num_slots: int) -> None:
        """Every sequence's slot must lie in pools of ``num_slots`` records, and be its own."""
        expect_slots(layer, self.slots_cpu, num_slots, self.slot_bounds)
        if self.repeated_slots:
            which = (f"state slot {self.repeated_slots[0]} is" if len(self.repeated_slots) == 1
                     else f"state slots {', '.join(map(str, self.repeated_slots))} are each")
            raise BackendInputError(f"{layer}: {which} given to more than one sequence of the step (slots "
                                    f"{self.slots_cpu.tolist()}); each sequence needs its own")
