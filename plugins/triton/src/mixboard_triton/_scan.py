"""Triton kernels: Mamba1's selective scan (S6) with its state in slots.

Per channel d and state n, token by token:

    dt  = softplus(dt_raw + dt_bias)                 (exact: no linear cut-off)
    h   = exp(dt * A) * h + dt * x * B
    y   = (sum_n h * C + D * x) * silu(z)

``scan`` runs any step (one program per sequence and block of channels, the
sequence's tokens in order, h in registers from the slot, or zeros for a
fresh sequence, back to the slot at the end); ``state_update`` runs a step of
one-token decodes (one program per decode and block of channels, h read and
written in place in its slot). Both share ``_token``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _token(h, x_ptr, dt_ptr, b_ptr, c_ptr, z_ptr, row, stride_x, stride_dt, stride_b, stride_c, stride_z,
           ch, cmask, n, nmask, A, D, dt_bias):
    """One token's recurrence for a block of channels: (new h [C, N], y [C])."""
    x = tl.load(x_ptr + row * stride_x + ch, mask=cmask, other=0.0).to(tl.float32)
    dt = tl.load(dt_ptr + row * stride_dt + ch, mask=cmask, other=0.0).to(tl.float32) + dt_bias
    dt = tl.maximum(dt, 0.0) + tl.log(1.0 + tl.exp(-tl.abs(dt)))  # softplus, stable for large |dt|
    B = tl.load(b_ptr + row * stride_b + n, mask=nmask, other=0.0).to(tl.float32)
    C = tl.load(c_ptr + row * stride_c + n, mask=nmask, other=0.0).to(tl.float32)
    z = tl.load(z_ptr + row * stride_z + ch, mask=cmask, other=0.0).to(tl.float32)
    h = tl.exp(dt[:, None] * A) * h + (dt * x)[:, None] * B[None, :]
    y = tl.sum(h * C[None, :], axis=1) + D * x
    return h, y * z * tl.sigmoid(z)


@triton.jit
def _scan_kernel(
    x_ptr, dt_ptr, b_ptr, c_ptr, z_ptr, out_ptr, a_ptr, d_ptr, dt_bias_ptr, ssm_ptr, qsl_ptr, ctx_ptr, slot_ptr,
    stride_x, stride_dt, stride_b, stride_c, stride_z, stride_out, stride_a, stride_slot, stride_ssm,
    channels, d_state,
    BLOCK_C: tl.constexpr, BLOCK_N: tl.constexpr,
):
    seq = tl.program_id(0)
    ch = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    n = tl.arange(0, BLOCK_N)
    cmask, nmask = ch < channels, n < d_state
    mask = cmask[:, None] & nmask[None, :]
    start = tl.load(qsl_ptr + seq).to(tl.int64)  # the loop's rows are 64-bit then (row * stride)
    end = tl.load(qsl_ptr + seq + 1).to(tl.int64)
    has_ctx = tl.load(ctx_ptr + seq) > 0
    state = ssm_ptr + tl.load(slot_ptr + seq).to(tl.int64) * stride_slot + ch[:, None] * stride_ssm + n[None, :]
    # A fresh sequence starts from zeros, whatever its slot holds. (tl.where: the interpreter refuses a
    # mask made with `&` of a scalar and a block.)
    h = tl.load(state, mask=tl.where(has_ctx, mask, False), other=0.0).to(tl.float32)
    A = tl.load(a_ptr + ch[:, None] * stride_a + n[None, :], mask=mask, other=0.0).to(tl.float32)
    D = tl.load(d_ptr + ch, mask=cmask, other=0.0).to(tl.float32)
    dt_bias = tl.load(dt_bias_ptr + ch, mask=cmask, other=0.0).to(tl.float32)
    for row in range(start, end):
        h, y = _token(h, x_ptr, dt_ptr, b_ptr, c_ptr, z_ptr, row, stride_x, stride_dt, stride_b,
                      stride_c, stride_z, ch, cmask, n, nmask, A, D, dt_bias)
        tl.store(out_ptr + row * stride_out + ch, y.to(out_ptr.dtype.element_ty), mask=cmask)
    tl.store(state, h.to(ssm_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _update_kernel(
    x_ptr, dt_ptr, b_ptr, c_ptr, z_ptr, out_ptr, a_ptr, d_ptr, dt_bias_ptr, ssm_ptr, slot_ptr,
    stride_x, stride_dt, stride_b, stride_c, stride_z, stride_out, stride_a, stride_slot, stride_ssm,
    channels, d_state,
    BLOCK_C: tl.constexpr, BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0)  # decode i is row i; it has context, so its slot holds h
    ch = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    n = tl.arange(0, BLOCK_N)
    cmask, nmask = ch < channels, n < d_state
    mask = cmask[:, None] & nmask[None, :]
    state = ssm_ptr + tl.load(slot_ptr + row).to(tl.int64) * stride_slot + ch[:, None] * stride_ssm + n[None, :]
    h = tl.load(state, mask=mask, other=0.0).to(tl.float32)
    A = tl.load(a_ptr + ch[:, None] * stride_a + n[None, :], mask=mask, other=0.0).to(tl.float32)
    D = tl.load(d_ptr + ch, mask=cmask, other=0.0).to(tl.float32)
    dt_bias = tl.load(dt_bias_ptr + ch, mask=cmask, other=0.0).to(tl.float32)
    h, y = _token(h, x_ptr, dt_ptr, b_ptr, c_ptr, z_ptr, row, stride_x, stride_dt, stride_b, stride_c, stride_z,
                  ch, cmask, n, nmask, A, D, dt_bias)
    tl.store(out_ptr + row * stride_out + ch, y.to(out_ptr.dtype.element_ty), mask=cmask)
    tl.store(state, h.to(ssm_ptr.dtype.element_ty), mask=mask)


def _blocks(channels: int, d_state: int, interpreted: bool) -> tuple[int, int]:
    """(channels, states) a program holds: h is [BLOCK_C, BLOCK_N] floats in registers on a GPU. In the
    interpreter (CPU tensors) a program costs per operation rather than per element: fewer, larger blocks."""
    block_n = triton.next_power_of_2(d_state)
    budget = 8192 if interpreted else 1024
    return min(triton.next_power_of_2(channels), max(16, budget // block_n)), block_n


def _launch(kernel, grid_rows: int, x, dt, B, C, z, A, D, dt_bias, ssm, per_sequence: tuple) -> torch.Tensor:
    channels, d_state = A.shape
    out = torch.empty_like(x)
    block_c, block_n = _blocks(channels, d_state, x.device.type == "cpu")
    kernel[(grid_rows, triton.cdiv(channels, block_c))](
        x, dt, B, C, z, out, A, D, dt_bias, ssm, *per_sequence,
        x.stride(0), dt.stride(0), B.stride(0), C.stride(0), z.stride(0), out.stride(0), A.stride(0),
        ssm.stride(0), ssm.stride(1), channels, d_state, BLOCK_C=block_c, BLOCK_N=block_n,
    )
    return out


def scan(x, dt, B, C, z, A, D, dt_bias, ssm: torch.Tensor, query_start_loc: torch.Tensor,
         context_lens: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """y [T, channels] for every sequence of a step; each slot's h advanced.

    x, dt (before bias and softplus), z: [T, channels]; B, C: [T, d_state]; any row stride, last
    dimension contiguous. A [channels, d_state]; D, dt_bias [channels]; ssm [slots, channels, d_state]
    (records any distance apart); query_start_loc, context_lens, slots: the step's int32 per sequence."""
    return _launch(_scan_kernel, slots.shape[0], x, dt, B, C, z, A, D, dt_bias, ssm,
                   (query_start_loc, context_lens, slots))


def state_update(x, dt, B, C, z, A, D, dt_bias, ssm: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """The same for a step of one-token decodes: row i is decode i, its h in slot slots[i]."""
    return _launch(_update_kernel, x.shape[0], x, dt, B, C, z, A, D, dt_bias, ssm, (slots,))
