"""Triton kernel: causal or full softmax attention over the paged K/V cache.

One kernel serves prefills and decodes alike (a decode is a sequence with
one new token). A program takes one sequence, one KV head and a tile of the
sequence's new tokens; its rows are (token, query head) pairs, the query
heads that share the KV head side by side (GQA: K and V are read once for
the group). It walks the visible keys in tiles of BLOCK_N positions, finding
each position's block through the sequence's row of the block table (any
block size, blocks in any order, pools whose blocks lie apart), with an
online softmax in float32. Sliding window and logit soft-capping are masks
and a tanh on the logits.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _paged_attention_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, table_ptr, qsl_ptr, seq_lens_ptr,
    stride_qt, stride_qh, stride_ot, stride_oh, stride_kb, stride_ko, stride_kh, stride_vb, stride_vo, stride_vh,
    stride_table, block_size, scale, soft_cap, window,
    GROUP: tl.constexpr, HEAD: tl.constexpr, HEAD_PAD: tl.constexpr, CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr, HAS_CAP: tl.constexpr, IEEE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    seq = tl.program_id(0)
    kv_head = tl.program_id(2)
    TOKENS: tl.constexpr = BLOCK_M // GROUP  # new tokens a program takes
    first = tl.program_id(1) * TOKENS
    q_start = tl.load(qsl_ptr + seq)
    q_len = tl.load(qsl_ptr + seq + 1) - q_start
    if first >= q_len:  # the grid covers the step's longest sequence
        return
    seq_len = tl.load(seq_lens_ptr + seq)
    context = seq_len - q_len

    r = tl.arange(0, BLOCK_M)
    token = first + r // GROUP
    head = kv_head * GROUP + r % GROUP
    row_ok = (r < TOKENS * GROUP) & (token < q_len)
    pos = context + token  # each row's position in its sequence
    d = tl.arange(0, HEAD_PAD)
    dmask = d < HEAD
    rows = (q_start + token).to(tl.int64)
    q = tl.load(q_ptr + rows[:, None] * stride_qt + head[:, None] * stride_qh + d[None, :],
                mask=row_ok[:, None] & dmask[None, :], other=0.0)

    # The keys any row of the tile sees: [lo, hi).
    hi = seq_len
    if CAUSAL:
        hi = tl.minimum(seq_len, context + tl.minimum(first + TOKENS, q_len))
    lo = 0
    if HAS_WINDOW:
        lo = tl.maximum(0, context + first - window + 1)

    m = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_PAD], dtype=tl.float32)
    table = table_ptr + seq.to(tl.int64) * stride_table
    for start in range(lo, hi, BLOCK_N):
        kp = start + tl.arange(0, BLOCK_N)
        kmask = kp < hi
        block = tl.load(table + kp // block_size, mask=kmask, other=0).to(tl.int64)
        offset = kp % block_size
        kv_mask = kmask[:, None] & dmask[None, :]
        k = tl.load(k_ptr + block[:, None] * stride_kb + offset[:, None] * stride_ko + kv_head * stride_kh + d[None, :],
                    mask=kv_mask, other=0.0)
        if IEEE:
            s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        else:
            s = tl.dot(q, tl.trans(k)) * scale
        if HAS_CAP:  # cap * tanh(s / cap), tanh written with exp for every backend Triton has
            s = soft_cap * (2.0 * tl.sigmoid(2.0 * s / soft_cap) - 1.0)
        visible = row_ok[:, None] & kmask[None, :]
        if CAUSAL:
            visible &= kp[None, :] <= pos[:, None]
        if HAS_WINDOW:
            visible &= kp[None, :] > pos[:, None] - window
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        base = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row that has seen no key yet keeps zeros
        p = tl.exp(s - base[:, None])
        alpha = tl.exp(m - base)
        l = l * alpha + tl.sum(p, axis=1)
        v = tl.load(v_ptr + block[:, None] * stride_vb + offset[:, None] * stride_vo + kv_head * stride_vh + d[None, :],
                    mask=kv_mask, other=0.0)
        if IEEE:
            pv = tl.dot(p.to(v.dtype), v, input_precision="ieee")
        else:
            pv = tl.dot(p.to(v.dtype), v)
        acc = acc * alpha[:, None] + pv
        m = m_new
    out = acc / tl.where(l == 0.0, 1.0, l)[:, None]  # every real row sees at least its own key: l > 0
    tl.store(out_ptr + rows[:, None] * stride_ot + head[:, None] * stride_oh + d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & dmask[None, :])


def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor,
                    query_start_loc: torch.Tensor, seq_lens: torch.Tensor, max_query_len: int, *, scale: float,
                    causal: bool, window: int | None, soft_cap: float | None) -> torch.Tensor:
    """Attention of the step's queries q [T, H, D] over the cache (k, v already stored there).

    k_cache, v_cache: [blocks, block_size, KVH, D], each block contiguous, blocks any distance apart;
    block_table [seqs, max_blocks], query_start_loc [seqs + 1], seq_lens [seqs]: the step's, int32."""
    T, H, D = q.shape
    kvh = k_cache.shape[2]
    group = H // kvh
    head_pad = max(16, triton.next_power_of_2(D))  # tl.dot wants 16 or more along each side
    block_m = max(16, triton.next_power_of_2(group), min(64, triton.next_power_of_2(max_query_len * group)))
    block_n = 64 if head_pad <= 64 else 32  # the K and V tiles stay within registers at head sizes up to 256
    out = torch.empty_like(q)
    grid = (seq_lens.shape[0], triton.cdiv(max_query_len, block_m // group), kvh)
    _paged_attention_kernel[grid](
        q, k_cache, v_cache, out, block_table, query_start_loc, seq_lens,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1), k_cache.stride(0), k_cache.stride(1),
        k_cache.stride(2), v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        block_table.stride(0), k_cache.shape[1], scale, soft_cap or 1.0, window or 0,
        GROUP=group, HEAD=D, HEAD_PAD=head_pad, CAUSAL=causal, HAS_WINDOW=window is not None,
        HAS_CAP=soft_cap is not None, IEEE=q.dtype == torch.float32, BLOCK_M=block_m, BLOCK_N=block_n,
    )
    return out
