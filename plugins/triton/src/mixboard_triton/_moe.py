"""Triton kernels: the experts' two products over a step's (token, expert) pairs, grouped by expert.

The pairs are sorted by expert once (torch, on the device, no host sync) and
cut into tiles of at most BLOCK_M pairs of one expert. The grid has a fixed
upper bound of tiles, ceil(pairs / BLOCK_M) + experts; a program whose tile
is past the last real one returns at once. Each program takes one tile and
one block of output columns:

    _up_kernel:    mid[pair] = silu(x[token] @ gate[e].T) * (x[token] @ up[e].T)     silu
                               relu(x[token] @ up[e].T) ** 2                          relu2
    _down_kernel:  out[pair] = weight[pair] * (mid[pair] @ down[e].T)                float32

``out`` is laid in the pairs' original order ([tokens, top_k, hidden]), so a
token's sum over its experts is one reduction afterwards, in float32.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _up_kernel(x_ptr, w_ptr, mid_ptr, tile_expert_ptr, tile_start_ptr, tile_end_ptr, pair_token_ptr,
               hidden, inner, stride_x, stride_we, stride_wr, stride_mid,
               GATED: tl.constexpr, IEEE: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    tile = tl.program_id(0)
    e = tl.load(tile_expert_ptr + tile)
    if e < 0:  # past the step's last tile
        return
    start = tl.load(tile_start_ptr + tile)
    end = tl.load(tile_end_ptr + tile)
    r = start + tl.arange(0, BLOCK_M)
    rmask = r < end
    token = tl.load(pair_token_ptr + r, mask=rmask, other=0).to(tl.int64)
    n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = n < inner
    w = w_ptr + e.to(tl.int64) * stride_we
    acc_gate = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    acc_up = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, hidden, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        kmask = k < hidden
        a = tl.load(x_ptr + token[:, None] * stride_x + k[None, :], mask=rmask[:, None] & kmask[None, :], other=0.0)
        wmask = kmask[:, None] & nmask[None, :]
        # [BLOCK_K, BLOCK_N] tiles of the weight's rows n (gate's; up's follow inner rows later)
        first = tl.load(w + n[None, :] * stride_wr + k[:, None], mask=wmask, other=0.0)
        if IEEE:
            acc_gate += tl.dot(a, first, input_precision="ieee")
        else:
            acc_gate += tl.dot(a, first)
        if GATED:
            up = tl.load(w + (inner + n)[None, :] * stride_wr + k[:, None], mask=wmask, other=0.0)
            if IEEE:
                acc_up += tl.dot(a, up, input_precision="ieee")
            else:
                acc_up += tl.dot(a, up)
    if GATED:
        h = acc_gate * tl.sigmoid(acc_gate) * acc_up
    else:
        h = tl.maximum(acc_gate, 0.0)
        h = h * h
    tl.store(mid_ptr + r.to(tl.int64)[:, None] * stride_mid + n[None, :], h.to(mid_ptr.dtype.element_ty),
             mask=rmask[:, None] & nmask[None, :])


@triton.jit
def _down_kernel(mid_ptr, w_ptr, out_ptr, tile_expert_ptr, tile_start_ptr, tile_end_ptr, pair_index_ptr,
                 pair_weight_ptr, hidden, inner, stride_mid, stride_we, stride_wr, stride_out,
                 IEEE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    tile = tl.program_id(0)
    e = tl.load(tile_expert_ptr + tile)
    if e < 0:
        return
    start = tl.load(tile_start_ptr + tile)
    end = tl.load(tile_end_ptr + tile)
    r = start + tl.arange(0, BLOCK_M)
    rmask = r < end
    n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = n < hidden
    w = w_ptr + e.to(tl.int64) * stride_we
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, inner, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        kmask = k < inner
        a = tl.load(mid_ptr + r.to(tl.int64)[:, None] * stride_mid + k[None, :],
                    mask=rmask[:, None] & kmask[None, :], other=0.0)
        d = tl.load(w + n[None, :] * stride_wr + k[:, None], mask=kmask[:, None] & nmask[None, :], other=0.0)
        if IEEE:
            acc += tl.dot(a, d, input_precision="ieee")
        else:
            acc += tl.dot(a, d)
    pair = tl.load(pair_index_ptr + r, mask=rmask, other=0).to(tl.int64)
    weight = tl.load(pair_weight_ptr + pair, mask=rmask, other=0.0)
    tl.store(out_ptr + pair[:, None] * stride_out + n[None, :], acc * weight[:, None],
             mask=rmask[:, None] & nmask[None, :])


def _block(size: int, most: int) -> int:
    """A power of two covering ``size`` up to ``most``, at least 16 (tl.dot's least side)."""
    return max(16, min(most, triton.next_power_of_2(size)))


def _tiles(flat_experts: torch.Tensor, num_experts: int, block_m: int):
    """(tile_expert, tile_start, tile_end) int32, each of ceil(pairs / block_m) + experts entries: the tiles
    of at most block_m sorted pairs of one expert, in expert order, then -1 experts (no tile)."""
    counts = torch.bincount(flat_experts, minlength=num_experts)
    tiles = (counts + block_m - 1) // block_m
    tiles_through = tiles.cumsum(0)  # tiles of experts 0..e
    rows_before = counts.cumsum(0) - counts  # the expert's first sorted pair
    t = torch.arange(triton.cdiv(flat_experts.numel(), block_m) + num_experts, device=flat_experts.device)
    expert = torch.searchsorted(tiles_through, t, right=True)
    real = expert < num_experts
    e = expert.clamp(max=num_experts - 1)
    start = rows_before[e] + (t - (tiles_through[e] - tiles[e])) * block_m
    end = rows_before[e] + counts[e]
    return (torch.where(real, expert, -1).to(torch.int32), start.to(torch.int32), end.to(torch.int32))


def run_experts(x: torch.Tensor, experts: torch.Tensor, weights: torch.Tensor, gate_up: torch.Tensor,
                down: torch.Tensor, *, gated: bool) -> torch.Tensor:
    """[T, hidden] float32: each token's chosen experts' outputs summed with their float32 weights.

    x [T, hidden] (rows contiguous); experts [T, top_k] int64; weights [T, top_k] float32;
    gate_up [E, rows, hidden] and down [E, hidden, inner], contiguous, in x's dtype."""
    T, hidden = x.shape
    top_k = experts.shape[1]
    num_experts, inner = down.shape[0], down.shape[2]
    pairs = T * top_k
    flat = experts.reshape(-1)
    order = flat.argsort(stable=True)  # the sorted pairs' original indices (token * top_k + j)
    pair_token = (order // top_k).to(torch.int32)
    block_m = _block(triton.cdiv(pairs, num_experts), 64)  # about the rows an expert gets
    tile_expert, tile_start, tile_end = _tiles(flat, num_experts, block_m)
    ieee = x.dtype == torch.float32  # no TF32 in a float32 layer
    mid = torch.empty(pairs, inner, dtype=x.dtype, device=x.device)
    block_n, block_k = _block(inner, 64), _block(hidden, 64)
    _up_kernel[(tile_expert.numel(), triton.cdiv(inner, block_n))](
        x, gate_up, mid, tile_expert, tile_start, tile_end, pair_token, hidden, inner,
        x.stride(0), gate_up.stride(0), gate_up.stride(1), mid.stride(0),
        GATED=gated, IEEE=ieee, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k)
    out = torch.empty(pairs, hidden, dtype=torch.float32, device=x.device)
    block_n, block_k = _block(hidden, 64), _block(inner, 64)
    _down_kernel[(tile_expert.numel(), triton.cdiv(hidden, block_n))](
        mid, down, out, tile_expert, tile_start, tile_end, order, weights.reshape(-1).contiguous(), hidden, inner,
        mid.stride(0), down.stride(0), down.stride(1), out.stride(0),
        IEEE=ieee, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k)
    return out.view(T, top_k, hidden).sum(1)
