"""Test double of flash-attn 2.8's ``flash_attn_varlen_func``, in plain torch (CPU).

It implements the documented semantics of the real function (the docstring
of flash_attn/flash_attn_interface.py) and refuses what the real kernel's
checks refuse (csrc/flash_attn/flash_api.cpp: dtypes, int32 index tensors,
unit last stride, head sizes, page block size), so a backend's argument
plumbing is exercised as the GPU would exercise it:

* q [total_q, H, D]; k, v [total_k, Hkv, D], or with ``block_table`` the
  paged pools [num_blocks, page_block_size, Hkv, D] (page_block_size a
  multiple of 256) and block_table [batch, max_blocks] int32;
* sequence b's queries are q[cu_seqlens_q[b]:cu_seqlens_q[b+1]] and its key
  count is cu_seqlens_k[b+1] - cu_seqlens_k[b];
* query head h reads kv head h // (H / Hkv) (GQA/MQA);
* logits are softmax_scale * q.k, then softcap * tanh(logits / softcap) when
  softcap > 0;
* causal masks align to the bottom right: query i sees key j iff
  j <= i + seqlen_k - seqlen_q; window_size (left, right) keeps keys in
  [i + seqlen_k - seqlen_q - left, i + seqlen_k - seqlen_q + right]
  (-1: unbounded); a row with no key gives zeros.

Computes in float32, returns q's dtype. Dropout, ALiBi and attention
probabilities are not implemented (they raise).
"""

from __future__ import annotations

import torch

__version__ = "2.8.3"
IS_TEST_DOUBLE = True


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None):
    if dropout_p != 0.0 or alibi_slopes is not None or return_attn_probs:
        raise NotImplementedError("the flash_attn test double does no dropout, ALiBi or attention probabilities")
    _check(q.dtype in (torch.float16, torch.bfloat16), "FlashAttention only support fp16 and bf16 data type")
    _check(k.dtype == q.dtype and v.dtype == q.dtype, "query, key and value must have the same dtype")
    _check(cu_seqlens_q.dtype == torch.int32, "cu_seqlens_q must have dtype int32")
    _check(cu_seqlens_k.dtype == torch.int32, "cu_seqlens_k must have dtype int32")
    for t in (q, k, v):
        _check(t.stride(-1) == 1, "Input tensor must have contiguous last dimension")
    _check(q.device == k.device == v.device == cu_seqlens_q.device == cu_seqlens_k.device,
           "all tensors must be on the same device")
    paged = block_table is not None
    H, D = q.shape[1], q.shape[2]
    Hkv = k.shape[2] if paged else k.shape[1]
    _check(D <= 256, "FlashAttention forward only supports head dimension at most 256")
    _check(D % 8 == 0, "query, key, value, and out_ must have a head_size that is a multiple of 8")
    _check(H % Hkv == 0, "Number of heads in key/value must divide number of heads in query")
    batch = cu_seqlens_q.numel() - 1
    _check(batch > 0 and cu_seqlens_k.numel() == batch + 1, "cu_seqlens_q and cu_seqlens_k must have batch + 1 entries")
    if paged:
        _check(block_table.dtype == torch.int32, "block_table must have dtype torch.int32")
        _check(block_table.stride(-1) == 1, "block_table must have contiguous last dimension")
        _check(block_table.device == q.device, "block_table must be on the same device")
        _check(block_table.shape[0] == batch, "block_table must have one row per sequence")
        page = k.shape[1]
        _check(page % 256 == 0, "Paged KV cache block size must be divisible by 256")
        _check(tuple(k.shape[2:]) == (Hkv, D) and v.shape == k.shape, "k, v must be [num_blocks, page, Hkv, D]")
    else:
        _check(tuple(k.shape[1:]) == (Hkv, D) and v.shape == k.shape, "k, v must be [total_k, Hkv, D]")
    if softmax_scale is None:
        softmax_scale = D ** -0.5
    left, right = window_size
    if causal:
        right = 0

    cu_q, cu_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    _check(cu_q[-1] == q.shape[0], f"cu_seqlens_q ends at {cu_q[-1]} but q holds {q.shape[0]} tokens")
    out = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    group = H // Hkv
    for b in range(batch):
        sq, sk = cu_q[b + 1] - cu_q[b], cu_k[b + 1] - cu_k[b]
        # the kernel sizes its grid by these: too small would skip work
        _check(0 <= sq <= max_seqlen_q, f"sequence {b} has {sq} queries but max_seqlen_q is {max_seqlen_q}")
        _check(0 <= sk <= max_seqlen_k, f"sequence {b} has {sk} keys but max_seqlen_k is {max_seqlen_k}")
        if sq == 0:
            continue
        if paged:
            pages = -(-sk // page)
            _check(pages <= block_table.shape[1], f"sequence {b} needs {pages} pages, its block table row has fewer")
            ids = block_table[b, :pages].long()
            _check(bool(((ids >= 0) & (ids < k.shape[0])).all()), f"sequence {b}: block id outside the pool")
            keys = k.index_select(0, ids).reshape(-1, Hkv, D)[:sk]
            values = v.index_select(0, ids).reshape(-1, Hkv, D)[:sk]
        else:
            keys, values = k[cu_k[b]:cu_k[b + 1]], v[cu_k[b]:cu_k[b + 1]]
        qs = q[cu_q[b]:cu_q[b + 1]].float().transpose(0, 1)  # [H, sq, D]
        keys = keys.float().transpose(0, 1).repeat_interleave(group, 0)  # [H, sk, D]
        values = values.float().transpose(0, 1).repeat_interleave(group, 0)
        logits = softmax_scale * qs @ keys.transpose(1, 2)  # [H, sq, sk]
        if softcap > 0:
            logits = softcap * torch.tanh(logits / softcap)
        i = torch.arange(sq, device=q.device)[:, None] + (sk - sq)  # each query's bottom-right aligned position
        j = torch.arange(sk, device=q.device)[None, :]
        visible = torch.ones(sq, sk, dtype=torch.bool, device=q.device)
        if left >= 0:
            visible &= j >= i - left
        if right >= 0:
            visible &= j <= i + right
        probs = torch.softmax(logits.masked_fill(~visible, float("-inf")), dim=-1).nan_to_num(0.0)
        out[cu_q[b]:cu_q[b + 1]] = (probs @ values).transpose(0, 1)
    return out.to(q.dtype)


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise RuntimeError(message)
