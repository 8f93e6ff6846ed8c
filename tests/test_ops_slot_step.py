"""mixboard.ops.slot_step: the one plan of a step that the mamba1, mamba2 and
short_conv backends share (their own tests run it through their impls)."""

from __future__ import annotations

import pytest
import torch

from mixboard import CommonBatchMetadata
from mixboard.ops.causal_conv import ConvIndex
from mixboard.ops.checks import BackendInputError
from mixboard.ops.slot_step import Prefill, SlotStep


def step(query_lens, context_lens, slots, width=4):
    return SlotStep.plan(CommonBatchMetadata.build(query_lens, context_lens, slots, [[]] * len(slots), 16), width)


def test_a_mixed_step_in_host_ints():
    s = step([1, 1, 5, 3], [7, 2, 0, 4], [3, 4, 0, 9])
    assert (s.num_tokens, s.num_decodes, s.all_decodes) == (10, 2, False)
    assert s.decode_range == (3, 5) and s.slot_bounds == (0, 9) and s.repeated_slots == ()
    assert s.prefills == (Prefill(2, 7, 0, fresh=True), Prefill(7, 10, 9, fresh=False))
    assert s.decode_slots.dtype == torch.int64 and s.decode_slots.tolist() == [3, 4]
    assert s.decode_slots_i32.dtype == torch.int32 and s.decode_slots_i32.tolist() == [3, 4]
    assert isinstance(s.conv_index, ConvIndex) and s.conv_index.width == 4


def test_decodes_only_need_no_conv_index_and_slots_out_of_order_no_range():
    s = step([1, 1, 1], [2, 9, 4], [5, 1, 2])
    assert s.all_decodes and s.conv_index is None and s.decode_range is None


def test_device_tensors_are_made_on_first_use_then_shared():
    s = step([1, 4], [3, 0], [0, 1])
    assert not {"decode_slots", "decode_slots_i32", "conv_index"} & set(vars(s))
    assert s.conv_index is s.conv_index


def test_slot_checks_name_the_layer_and_the_slots():
    s = step([1, 1, 4], [3, 3, 0], [2, 6, 2])
    with pytest.raises(BackendInputError, match=r"^L: state slot \[2, 6, 2\] out of range: the pool has 4 slots"):
        s.check_slots("L", 4)
    with pytest.raises(BackendInputError, match=r"^L: state slot 2 is given to more than one sequence of the step "
                                                r"\(slots \[2, 6, 2\]\); each sequence needs its own$"):
        s.check_slots("L", 8)
    twice = step([1, 1, 1, 1], [1, 1, 1, 1], [3, 5, 3, 5])
    with pytest.raises(BackendInputError, match="state slots 3, 5 are each given to more than one sequence"):
        twice.check_slots("L", 8)


def test_meta_is_the_plan_or_the_steps_metadata_and_nothing_else():
    common = CommonBatchMetadata.build([2], [0], [0], [[]], 16)
    planned = SlotStep.plan(common, 4)
    assert SlotStep.of("L", planned, 4) is planned
    assert SlotStep.of("L", common, 4) == planned
    with pytest.raises(BackendInputError, match="^L: meta was planned for conv width 4, the layer's is 3"):
        SlotStep.of("L", planned, 3)
    with pytest.raises(BackendInputError, match="^L: meta must be what this backend's builder returns .* got dict"):
        SlotStep.of("L", {}, 4)
