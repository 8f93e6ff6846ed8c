"""The shared ops against plain loops."""

from __future__ import annotations

import pytest
import torch

from mixboard import CommonBatchMetadata
from mixboard.ops.causal_conv import ConvIndex, causal_conv1d, causal_conv1d_step
from mixboard.ops.checks import BackendInputError, expect, expect_slots
from mixboard.ops.slots import gather_slots, scatter_slots


def naive_conv(x, weight, bias, state):
    """One sequence: x [L, D], state [D, W-1] (oldest first). Returns out, new state."""
    full = torch.cat([state.t(), x], 0)
    width = weight.shape[1]
    out = torch.stack([(full[t:t + width].t() * weight).sum(1) + (0 if bias is None else bias)
                       for t in range(x.shape[0])])
    return out, full[-(width - 1):].t()


@pytest.mark.parametrize("width", [2, 3, 4])
def test_causal_conv_over_a_ragged_batch_with_state(width):
    torch.manual_seed(width)
    dim, slots = 5, 6
    query_lens, context_lens, seq_slots = [1, 1, 4, 1, 7], [3, 9, 0, 0, 2], [4, 0, 2, 5, 1]
    pool = torch.randn(slots, dim, width - 1, dtype=torch.float64)
    before = pool.clone()
    x = torch.randn(sum(query_lens), dim, dtype=torch.float64)
    weight, bias = torch.randn(dim, width, dtype=torch.float64), torch.randn(dim, dtype=torch.float64)
    meta = CommonBatchMetadata.build(query_lens, context_lens, seq_slots, [[0, 1]] * 5, 16)
    out = causal_conv1d(x, weight, bias, pool, ConvIndex.build(meta, width), activation="silu")
    start = 0
    for q, c, s in zip(query_lens, context_lens, seq_slots):
        state = before[s] if c > 0 else torch.zeros(dim, width - 1, dtype=torch.float64)
        expected, new_state = naive_conv(x[start:start + q], weight, bias, state)
        torch.testing.assert_close(out[start:start + q], torch.nn.functional.silu(expected))
        torch.testing.assert_close(pool[s], new_state)
        start += q
    untouched = [i for i in range(slots) if i not in seq_slots]
    torch.testing.assert_close(pool[untouched], before[untouched])


def test_slots_gather_zeroes_fresh_sequences_and_scatter_writes_in_place():
    pool = torch.arange(12.0).view(4, 3)
    got = gather_slots(pool, torch.tensor([2, 0]), torch.tensor([False, True]))
    assert got.tolist() == [[6.0, 7.0, 8.0], [0.0, 0.0, 0.0]]
    scatter_slots(pool, torch.tensor([3]), torch.tensor([[-1.0, -2.0, -3.0]]))
    assert pool[3].tolist() == [-1.0, -2.0, -3.0]


def test_input_checks_name_the_layer_and_what_was_expected():
    with pytest.raises(BackendInputError, match=r"model.layers.2.mixer: x must have shape \[\*, 8\], got \[3, 4\]"):
        expect("model.layers.2.mixer", "x", torch.zeros(3, 4), (None, 8))
    with pytest.raises(BackendInputError, match="must be torch.bfloat16, got torch.float32"):
        expect("l", "q", torch.zeros(2), (2,), dtype=torch.bfloat16)
    with pytest.raises(BackendInputError, match=r"state slot \[0, 7\] out of range: the pool has 4 slots"):
        expect_slots("l", torch.tensor([0, 7]), 4)


@pytest.mark.parametrize("bias", [True, False])
def test_causal_conv_step_equals_the_ragged_conv_for_decodes(bias):
    torch.manual_seed(1)
    dim, width, slots = 6, 4, 5
    pool = torch.randn(slots, dim, width - 1, dtype=torch.float64)
    x = torch.randn(3, dim, dtype=torch.float64)
    weight = torch.randn(dim, width, dtype=torch.float64)
    b = torch.randn(dim, dtype=torch.float64) if bias else None
    seq_slots = [3, 0, 4]
    meta = CommonBatchMetadata.build([1, 1, 1], [5, 2, 9], seq_slots, [[0]] * 3, 16)
    ragged_pool = pool.clone()
    expected = causal_conv1d(x, weight, b, ragged_pool, ConvIndex.build(meta, width), activation="silu")
    got = causal_conv1d_step(x, weight, b, pool, torch.tensor(seq_slots), activation="silu")
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(pool, ragged_pool)


def test_repeated_lists_each_repeat_once_in_the_order_it_repeats():
    from mixboard.ops.checks import repeated

    assert repeated([5, 3, 5, 3, 3, 1]) == (5, 3)
    assert repeated([0, 1, 2]) == ()


def test_sequence_rows_give_each_sequence_its_tokens_slot_and_whether_it_continues():
    meta = CommonBatchMetadata.build([1, 1, 5, 3], [4, 9, 0, 6], [7, 2, 0, 5], [[0]] * 4, 16)
    assert meta.sequence_rows.tolist() == [[0, 1, 7, 1], [1, 2, 2, 1], [2, 7, 0, 0], [7, 10, 5, 1]]
    assert meta.sequence_rows.dtype == torch.int64 and meta.sequence_rows.is_contiguous()
    assert meta.sequence_rows is meta.sequence_rows  # made once per step, shared by every layer

