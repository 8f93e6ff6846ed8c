"""Triton kernels: the depthwise causal conv with its state in slots, shared by
short_conv (``y = C * conv(B * x)``) and mamba1 (``silu(conv(x))``).

The conv's input u is ``B * x`` (short_conv) or x (mamba1); a slot's state is
the sequence's last W - 1 values of u, oldest first. ``conv_ragged`` runs any
step (one program per sequence and block of channels, walking the sequence's
tokens in tiles); ``conv_step`` runs a step of one-token decodes (one program
per decode and block of channels, the window read from the slot).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _conv_ragged_kernel(
    x_ptr, b_ptr, c_ptr, out_ptr, w_ptr, bias_ptr, state_ptr, qsl_ptr, ctx_ptr, slot_ptr,
    stride_x, stride_b, stride_c, stride_out, stride_w, stride_slot, stride_state,
    channels,
    W: tl.constexpr, WP: tl.constexpr, GATED: tl.constexpr, HAS_BIAS: tl.constexpr, SILU: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr,
):
    seq = tl.program_id(0)
    ch = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = ch < channels
    start = tl.load(qsl_ptr + seq)
    length = tl.load(qsl_ptr + seq + 1) - start
    # The earliest input the window may reach: W - 1 before the step from the state, or for a fresh
    # sequence none (it starts from zeros, whatever its slot holds).
    first = tl.where(tl.load(ctx_ptr + seq) > 0, -(W - 1), 0)
    state = state_ptr + tl.load(slot_ptr + seq).to(tl.int64) * stride_slot + ch * stride_state  # [C] -> column 0
    bias = tl.zeros([BLOCK_C], dtype=tl.float32)
    if HAS_BIAS:
        bias = tl.load(bias_ptr + ch, mask=cmask, other=0.0).to(tl.float32)

    for t0 in range(0, length, BLOCK_T):
        t = t0 + tl.arange(0, BLOCK_T)  # the tile's tokens, counted from the sequence's first new one
        tmask = t < length
        acc = tl.zeros([BLOCK_T, BLOCK_C], dtype=tl.float32) + bias[None, :]
        for k in tl.static_range(W):
            rel = t - (W - 1) + k  # where tap k reads: < 0 is before the step, in the state
            u = _conv_input(x_ptr, b_ptr, stride_x, stride_b, start, state, first, rel, tmask, ch, cmask, W, GATED)
            wk = tl.load(w_ptr + ch * stride_w + k, mask=cmask, other=0.0).to(tl.float32)
            acc += wk[None, :] * u
        if SILU:
            acc = acc * tl.sigmoid(acc)
        rows = (start + t).to(tl.int64)
        mask = tmask[:, None] & cmask[None, :]
        if GATED:
            acc *= tl.load(c_ptr + rows[:, None] * stride_c + ch[None, :], mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + rows[:, None] * stride_out + ch[None, :], acc.to(out_ptr.dtype.element_ty), mask=mask)

    # The new state: column j holds u at rel = length - (W - 1) + j, from this step's tokens or, for a
    # sequence shorter than the window, shifted from the old state. Everything is read before it is written.
    j = tl.arange(0, WP)
    rel = length - (W - 1) + j
    jmask = j < W - 1
    u = _conv_input(x_ptr, b_ptr, stride_x, stride_b, start, state, first, rel, jmask, ch, cmask, W, GATED)
    tl.store(state[None, :] + j[:, None], u.to(state_ptr.dtype.element_ty), mask=jmask[:, None] & cmask[None, :])


@triton.jit
def _conv_input(x_ptr, b_ptr, stride_x, stride_b, start, state, first, rel, valid, ch, cmask, W: tl.constexpr,
                GATED: tl.constexpr):
    """u at positions ``rel`` of the sequence, counted from its first new token: for rel >= 0 the step's
    row start + rel (x, times B when GATED); for first <= rel < 0 the state's column rel + W - 1; else 0.
    [len(rel), C] float32."""
    rows = (start + rel).to(tl.int64)
    mask = (valid & (rel >= 0))[:, None] & cmask[None, :]
    u = tl.load(x_ptr + rows[:, None] * stride_x + ch[None, :], mask=mask, other=0.0).to(tl.float32)
    if GATED:
        u *= tl.load(b_ptr + rows[:, None] * stride_b + ch[None, :], mask=mask, other=0.0).to(tl.float32)
    saved = (valid & (rel < 0) & (rel >= first))[:, None] & cmask[None, :]
    return u + tl.load(state[None, :] + (rel + W - 1)[:, None], mask=saved, other=0.0).to(tl.float32)


@triton.jit
def _conv_step_kernel(
    x_ptr, b_ptr, c_ptr, out_ptr, w_ptr, bias_ptr, state_ptr, slot_ptr,
    stride_x, stride_b, stride_c, stride_out, stride_w, stride_slot, stride_state,
    channels,
    W: tl.constexpr, WP: tl.constexpr, GATED: tl.constexpr, HAS_BIAS: tl.constexpr, SILU: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    row = tl.program_id(0)  # decode i is row i, and has context: its window is in its slot
    ch = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = ch < channels
    state = state_ptr + tl.load(slot_ptr + row).to(tl.int64) * stride_slot + ch * stride_state
    u = tl.load(x_ptr + row * stride_x + ch, mask=cmask, other=0.0).to(tl.float32)
    if GATED:
        u *= tl.load(b_ptr + row * stride_b + ch, mask=cmask, other=0.0).to(tl.float32)
    # The window [C, W]: the state's W - 1 columns, then u.
    j = tl.arange(0, WP)
    in_state = (j < W - 1)[None, :] & cmask[:, None]
    window = tl.load(state[:, None] + j[None, :], mask=in_state, other=0.0).to(tl.float32)
    window = tl.where((j == W - 1)[None, :], u[:, None], window)
    w = tl.load(w_ptr + ch[:, None] * stride_w + j[None, :], mask=(j < W)[None, :] & cmask[:, None], other=0.0)
    acc = tl.sum(w.to(tl.float32) * window, axis=1)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + ch, mask=cmask, other=0.0).to(tl.float32)
    if SILU:
        acc = acc * tl.sigmoid(acc)
    if GATED:
        acc *= tl.load(c_ptr + row * stride_c + ch, mask=cmask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_out + ch, acc.to(out_ptr.dtype.element_ty), mask=cmask)
    # Shift the window by one: the state keeps its last W - 1 columns.
    shifted = tl.load(state[:, None] + (j + 1)[None, :], mask=((j + 1) < W - 1)[None, :] & cmask[:, None], other=0.0)
    shifted = tl.where((j == W - 2)[None, :], u[:, None], shifted.to(tl.float32))
    tl.store(state[:, None] + j[None, :], shifted.to(state_ptr.dtype.element_ty), mask=in_state)


def _channel_block(x: torch.Tensor) -> int:
    """Channels a program takes. In the interpreter (CPU tensors) a program costs per operation rather
    than per element: fewer, larger blocks."""
    return min(triton.next_power_of_2(x.shape[1]), 512 if x.device.type == "cpu" else 128)


def _gates(B: torch.Tensor | None, C: torch.Tensor | None, x: torch.Tensor):
    """The gate tensors and their row strides (x stands in, unread, where there are none)."""
    if B is None:
        return x, x, 0, 0
    return B, C, B.stride(0), C.stride(0)


def conv_ragged(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, state: torch.Tensor,
                query_start_loc: torch.Tensor, context_lens: torch.Tensor, slots: torch.Tensor, max_query_len: int,
                *, B: torch.Tensor | None = None, C: torch.Tensor | None = None, silu: bool = False) -> torch.Tensor:
    """The conv of every sequence of a step: [T, channels] out, each slot's state advanced.

    x (and B, C): [T, channels], any row stride; weight [channels, W]; state [slots, channels, W - 1]
    (records any distance apart); query_start_loc, context_lens, slots: the step's int32 per sequence."""
    T, channels = x.shape
    W = weight.shape[1]
    out = torch.empty((T, channels), dtype=x.dtype, device=x.device)
    b, c, sb, sc = _gates(B, C, x)
    block_c = _channel_block(x)
    grid = (slots.shape[0], triton.cdiv(channels, block_c))
    _conv_ragged_kernel[grid](
        x, b, c, out, weight, weight if bias is None else bias, state, query_start_loc, context_lens, slots,
        x.stride(0), sb, sc, out.stride(0), weight.stride(0), state.stride(0), state.stride(1),
        channels,
        W=W, WP=triton.next_power_of_2(W - 1), GATED=B is not None, HAS_BIAS=bias is not None, SILU=silu,
        BLOCK_T=min(triton.next_power_of_2(max_query_len), 64), BLOCK_C=block_c,
    )
    return out


def conv_step(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, state: torch.Tensor,
              slots: torch.Tensor, *, B: torch.Tensor | None = None, C: torch.Tensor | None = None,
              silu: bool = False) -> torch.Tensor:
    """The conv of a step of one-token decodes (row i is decode i, its window in slot slots[i])."""
    T, channels = x.shape
    W = weight.shape[1]
    out = torch.empty((T, channels), dtype=x.dtype, device=x.device)
    b, c, sb, sc = _gates(B, C, x)
    block_c = _channel_block(x)
    _conv_step_kernel[(T, triton.cdiv(channels, block_c))](
        x, b, c, out, weight, weight if bias is None else bias, state, slots,
        x.stride(0), sb, sc, out.stride(0), weight.stride(0), state.stride(0), state.stride(1),
        channels,
        W=W, WP=triton.next_power_of_2(W), GATED=B is not None, HAS_BIAS=bias is not None, SILU=silu,
        BLOCK_C=block_c,
    )
    return out
