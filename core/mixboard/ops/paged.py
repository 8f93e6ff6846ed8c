"""Paged K/V: the checks and the cache write every attention backend needs."""

from __future__ import annotations

from typing import Any, Mapping

import torch

from ..dtypes import DTYPES, torch_dtype
from ..kinds.attention import AttentionSpec
from .checks import BackendInputError, expect, expect_pool, expect_state, record_stride


def check_paged_inputs(layer: str, spec: AttentionSpec, q: Any, k: Any, v: Any, state: Mapping[str, Any],
                       num_tokens: int, block_size: int, block_range: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Raise BackendInputError unless q, k, v and the canonical pools fit the
    spec and the step; return (k_cache, v_cache). Reads only shapes, dtypes,
    devices and host-side facts, so it never waits for the device.

    Every attention layer runs this on every step, inside engines too, so
    the inputs are first compared all at once (a few C calls a tensor); only
    inputs that do not pass go through the checks one by one, which then
    name what is wrong."""
    try:
        k_cache, v_cache = state["k_cache"], state["v_cache"]
        dtype = _DTYPES[spec.dtype]
        heads, kv = (num_tokens, spec.num_heads, spec.head_size), (num_tokens, spec.num_kv_heads, spec.head_size)
        pool = (block_size, spec.num_kv_heads, spec.head_size)
        device = q.device
        if (q.shape == heads and k.shape == kv and v.shape == kv and k_cache.shape[1:] == pool
                and v_cache.shape == k_cache.shape and q.dtype == k.dtype == v.dtype == k_cache.dtype == v_cache.dtype
                == dtype and k.device == device and v.device == device and k_cache.device == device
                and v_cache.device == device and (k_cache.is_contiguous() or record_stride(k_cache) is not None)
                and (v_cache.is_contiguous() or record_stride(v_cache) is not None)
                and 0 <= block_range[0] and block_range[1] < k_cache.shape[0]):
            return k_cache, v_cache
    except (AttributeError, KeyError, TypeError):  # not tensors, a missing pool: named below
        pass
    return _check_one_by_one(layer, spec, q, k, v, state, num_tokens, block_size, block_range)


_DTYPES = {name: torch_dtype(name) for name in DTYPES}


def _check_one_by_one(layer: str, spec: AttentionSpec, q: Any, k: Any, v: Any, state: Mapping[str, Any],
                      num_tokens: int, block_size: int, block_range: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    dtype = torch_dtype(spec.dtype)
    T, H, KVH, D = num_tokens, spec.num_heads, spec.num_kv_heads, spec.head_size
    expect(layer, "q", q, (T, H, D), dtype)
    device = q.device
    expect(layer, "k", k, (T, KVH, D), dtype, device)
    expect(layer, "v", v, (T, KVH, D), dtype, device)
    expect_state(layer, state, ("k_cache", "v_cache"))
    k_cache, v_cache = state["k_cache"], state["v_cache"]
    expect(layer, "state['k_cache']", k_cache, (None, block_size, KVH, D), dtype, device)
    expect(layer, "state['v_cache']", v_cache, (k_cache.shape[0], block_size, KVH, D), dtype, device)
    expect_pool(layer, "state['k_cache']", k_cache)  # blocks may sit in larger pages (an engine's hybrid cache)
    expect_pool(layer, "state['v_cache']", v_cache)
    lo, hi = block_range
    if lo < 0 or hi >= k_cache.shape[0]:
        raise BackendInputError(f"{layer}: the step's block table or slot mapping uses blocks {lo}..{hi}, "
                                f"but state['k_cache'] has blocks 0..{k_cache.shape[0] - 1}")
    return k_cache, v_cache


def write_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor, k: torch.Tensor,
             v: torch.Tensor, where: tuple[torch.Tensor, torch.Tensor] | None = None) -> None:
    """Store this step's k, v ([T, kv_heads, D]) at their token slots
    (``block * block_size + offset``). ``where``: ``token_blocks(slot_mapping,
    block_size)`` when the caller keeps it for the step; needed only for
    pools whose blocks are apart (made here otherwise)."""
    for pool, new in ((k_cache, k), (v_cache, v)):
        if pool.is_contiguous():  # blocks back to back: one flat index over tokens
            pool.view(-1, *new.shape[1:]).index_copy_(0, slot_mapping, new)
        else:  # blocks apart: a flat view would write into what lies between them
            if where is None:
                where = token_blocks(slot_mapping, pool.shape[1])
            pool.index_put_(where, new)


def token_blocks(slot_mapping: torch.Tensor, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(block, offset) of each token slot: how a pool whose blocks are apart is indexed."""
    return torch.div(slot_mapping, block_size, rounding_mode="floor"), slot_mapping.remainder(block_size)
