"""Pools whose records sit in larger pages (the state contract: each record
contiguous, ``stride(0) >= record size``): the shared ops read and write
records in place and never touch the bytes between them."""

from __future__ import annotations

import pytest
import torch

from mixboard import CommonBatchMetadata
from mixboard.ops.causal_conv import ConvIndex, causal_conv1d, causal_conv1d_step
from mixboard.ops.checks import BackendInputError, expect_pool, record_stride
from mixboard.ops.paged import write_kv

PAD = -7.0


def in_pages(records: int, shape: tuple[int, ...], pad: int = 5, lead: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """(pool, buffer): pool [records, *shape] inside pages of lead + record + pad elements, the rest PAD."""
    size = torch.Size(shape).numel()
    buffer = torch.full((records, lead + size + pad), PAD, dtype=torch.float64)
    return buffer[:, lead:lead + size].view(records, *shape), buffer


def padding_intact(pool: torch.Tensor, buffer: torch.Tensor) -> bool:
    lead, size = pool.storage_offset(), pool[0].numel()
    return bool((buffer[:, :lead] == PAD).all() and (buffer[:, lead + size:] == PAD).all())


def test_record_stride_accepts_records_apart_and_refuses_what_breaks_a_record():
    pool, _ = in_pages(4, (2, 3))
    assert record_stride(pool) == 3 + 6 + 5
    assert record_stride(torch.zeros(4, 2, 3)) == 6
    assert record_stride(torch.zeros(4, 2, 3), 6) == 6 and record_stride(pool, 6) == 14  # size given: a shortcut
    assert record_stride(torch.zeros(1, 2, 3)[:, :, :2]) is None  # a record's own elements apart
    assert record_stride(torch.zeros(4, 3, 2).transpose(1, 2)) is None
    assert record_stride(torch.zeros(6).as_strided((4, 2), (1, 1))) is None  # records overlap
    assert record_stride(torch.zeros(20).as_strided((4, 1, 3), (5, 2, 1))) == 5  # a size-1 dim's stride is moot
    assert record_stride(torch.zeros(6, 6)[:1, :4].view(1, 2, 2)) == 4  # one record: its size, whatever stride(0)


def test_expect_pool_names_the_layer_the_pool_and_what_a_record_must_be():
    with pytest.raises(BackendInputError) as info:
        expect_pool("model.layers.2.mixer", "state['conv']", torch.zeros(4, 3, 2).transpose(1, 2))
    assert str(info.value) == ("model.layers.2.mixer: state['conv'] must be [num_records, 2, 3] with each record "
                               "contiguous and records at least one record apart (stride(0) >= 6), got strides [6, 1, 2]")
    pool, _ = in_pages(4, (2, 3))
    expect_pool("layer", "state['ssm']", pool)  # records apart: no error


def test_write_kv_into_blocks_apart_writes_the_tokens_and_nothing_between():
    blocks, bs, kvh, d = 5, 4, 2, 3
    k_cache, k_buffer = in_pages(blocks, (bs, kvh, d))
    v_cache, v_buffer = in_pages(blocks, (bs, kvh, d), pad=11, lead=0)
    flat_k, flat_v = torch.zeros(blocks, bs, kvh, d, dtype=torch.float64), torch.zeros(blocks, bs, kvh, d,
                                                                                        dtype=torch.float64)
    k_cache.zero_(), v_cache.zero_()
    slots = torch.tensor([17, 2, 9, 3, 12])  # block * 4 + offset, in no order
    k, v = torch.randn(5, kvh, d, dtype=torch.float64), torch.randn(5, kvh, d, dtype=torch.float64)
    write_kv(k_cache, v_cache, slots, k, v)
    write_kv(flat_k, flat_v, slots, k, v)  # contiguous pools: the flat path
    assert torch.equal(k_cache, flat_k) and torch.equal(v_cache, flat_v)
    assert padding_intact(k_cache, k_buffer) and padding_intact(v_cache, v_buffer)


@pytest.mark.parametrize("slot_range", [None, (2, 5)])
def test_the_conv_ops_read_and_write_slots_apart_in_place(slot_range):
    torch.manual_seed(0)
    dim, width, slots = 5, 4, 6
    pool, buffer = in_pages(slots, (dim, width - 1))
    pool.copy_(torch.randn(slots, dim, width - 1, dtype=torch.float64))
    flat = pool.clone()
    weight, bias = torch.randn(dim, width, dtype=torch.float64), torch.randn(dim, dtype=torch.float64)
    # decodes: the in-place path for consecutive slots, or the gather path
    order = [2, 3, 4]
    x = torch.randn(3, dim, dtype=torch.float64)
    ids = torch.tensor(order)
    got = causal_conv1d_step(x, weight, bias, pool, ids, slot_range=slot_range)
    want = causal_conv1d_step(x, weight, bias, flat, ids, slot_range=slot_range)
    assert torch.equal(got, want) and torch.equal(pool, flat) and padding_intact(pool, buffer)
    # a ragged step: decodes, a continued prefill and a fresh one
    meta = CommonBatchMetadata.build([1, 4, 3], [5, 2, 0], [5, 1, 3], [[0, 1]] * 3, 16)
    x = torch.randn(8, dim, dtype=torch.float64)
    index = ConvIndex.build(meta, width)
    got, want = causal_conv1d(x, weight, bias, pool, index), causal_conv1d(x, weight, bias, flat, index)
    assert torch.equal(got, want) and torch.equal(pool, flat) and padding_intact(pool, buffer)
