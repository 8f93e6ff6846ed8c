"""The ``mamba2_cpu`` impl: ``mamba2_torch``'s, with four parts in C, each
one call per step: the causal conv, the prefills' SSD scan, and the D skip
with the gated RMSNorm (``_prefill.c``; with ``gated_norm=False``, the D
skip alone, ``mamba2_torch``'s), and the decodes' state update
(``_decode.c``: dt's softplus, the update and y in one pass over each
state, where it lies in the pool). Where an input is not what a kernel
reads (another dtype, a strided input row), that part is
``mamba2_torch``'s. Pools whose records sit in larger pages (an engine's
hybrid cache) are not such a case: the kernels take each pool's record
stride.

In a bfloat16 layer the kernels sum in float32, as ``mamba2_torch`` does:
the inputs they read (xBC, dt, z) are widened to float32 copies (a few KB
a decode step), the conv reads and writes a bfloat16 conv pool in place
(``conv_bf16``), the SSM pool is float32 (``check`` asks it), and the
output is narrowed to bfloat16 once."""

from __future__ import annotations

import torch

from mixboard.ops.checks import record_stride

from .torch_impl import Mamba2TorchImpl

from . import _decode, _prefill  # noqa: E402  (after torch: the kernels then share torch's OpenMP runtime)

CONV_MAX_WIDTH = 8  # the conv kernel's window registers (_prefill.c's MAX_WIDTH)
HALF = (torch.bfloat16, torch.float16)  # inputs the kernels read as float32 copies
SERVED = (torch.float32, torch.bfloat16)  # the layer dtypes mamba2_cpu is declared for
CONV_OVER = {torch.float32: _prefill.conv, torch.bfloat16: _prefill.conv_bf16}  # by the conv pool's dtype


class Mamba2CpuImpl(Mamba2TorchImpl):
    # what the kernels read, laid out once per weights record (frozen, so it cannot go stale)
    _conv_for: tuple[object, torch.Tensor, torch.Tensor | None] | None = None
    _norm_for: tuple[object, torch.Tensor, torch.Tensor] | None = None
    _decode_for: tuple[object, torch.Tensor, torch.Tensor] | None = None

    def _decodes(self, step, x, dt, weights, B, C, ssm_pool) -> torch.Tensor:
        # the pool's records are contiguous and a record or more apart: InputChecks holds it to the contract
        if dt.dtype in HALF:
            dt = dt.float()
        if not (ssm_pool.dtype == dt.dtype == torch.float32 and dt.stride(-1) == 1
                and _row_contiguous(x) and _row_contiguous(B) and _row_contiguous(C) and B.stride(0) == C.stride(0)):
            return super()._decodes(step, x, dt, weights, B, C, ssm_pool)
        if self._decode_for is None or self._decode_for[0] is not weights:
            self._decode_for = (weights, weights.dt_bias.detach().float().contiguous(),
                                weights.A.detach().float().contiguous())
        _, dt_bias, A = self._decode_for
        spec = self.spec
        n, H, P, N = x.shape[0], spec.num_heads, spec.head_dim, spec.d_state
        y = torch.empty(n, H, P)
        slots = step.decode_slots.contiguous()  # int64; a no-op unless an engine hands slots as a strided view
        _decode.step(x.data_ptr(), x.stride(0), B.data_ptr(), C.data_ptr(), B.stride(0), dt.data_ptr(),
                     dt.stride(0), dt_bias.data_ptr(), A.data_ptr(), float(spec.dt_min), float(spec.dt_max), n, H,
                     P, spec.n_groups, N, ssm_pool.data_ptr(), record_stride(ssm_pool, H * P * N), slots.data_ptr(),
                     y.data_ptr(), H * P)
        return y

    def _conv(self, step, xBC, weights, conv_pool) -> torch.Tensor:
        # the pool's records are contiguous and a record or more apart: InputChecks holds it to the contract
        if xBC.dtype in HALF:
            xBC = xBC.float()  # summed in float32, as mamba2_torch sums a half-precision conv
        kernel = CONV_OVER.get(conv_pool.dtype)
        if not (kernel and xBC.dtype == torch.float32 and xBC.stride(-1) == 1 and self.spec.d_conv <= CONV_MAX_WIDTH):
            return super()._conv(step, xBC, weights, conv_pool)
        if self._conv_for is None or self._conv_for[0] is not weights:
            bias = None if weights.conv_bias is None else weights.conv_bias.detach().float().contiguous()
            self._conv_for = (weights, weights.conv_weight.detach().float().t().contiguous(), bias)
        _, wt, bias = self._conv_for
        seqs = step.common.sequence_rows
        T, D = xBC.shape
        out = torch.empty(T, D)
        kernel(xBC.data_ptr(), xBC.stride(0), D, self.spec.d_conv, wt.data_ptr(),
               0 if bias is None else bias.data_ptr(), conv_pool.data_ptr(),
               record_stride(conv_pool, D * (self.spec.d_conv - 1)), out.data_ptr(), D, seqs.data_ptr(), len(seqs))
        return out

    def _prefills(self, step, x, dts, A, B, C, ssm_pool, y) -> None:
        if not (ssm_pool.dtype == torch.float32 and y.is_contiguous()
                and all(_row_contiguous(t) for t in (x, B, C, dts)) and B.stride(0) == C.stride(0)):
            return super()._prefills(step, x, dts, A, B, C, ssm_pool, y)
        spec = self.spec
        runs = step.common.sequence_rows[step.num_decodes:]  # the prefills' rows: (start, end, slot, continues)
        A = A.contiguous()
        _prefill.ssd(x.data_ptr(), x.stride(0), B.data_ptr(), C.data_ptr(), B.stride(0), dts.data_ptr(),
                     dts.stride(0), A.data_ptr(), spec.num_heads, spec.head_dim, spec.n_groups, spec.d_state,
                     ssm_pool.data_ptr(), record_stride(ssm_pool, spec.num_heads * spec.head_dim * spec.d_state),
                     y.data_ptr(), y.stride(0), runs.data_ptr(), len(runs))

    def _output(self, y, x, z, weights, dtype) -> torch.Tensor:
        spec = self.spec
        # without the gated norm the D skip alone remains: mamba2_torch's one in-place addcmul over the step
        if spec.gated_norm and z.dtype in HALF:
            z = z.float()
        if not (spec.gated_norm and dtype in SERVED and z.dtype == torch.float32 and y.is_contiguous()
                and _row_contiguous(x) and z.stride(-1) == 1):
            return super()._output(y, x, z, weights, dtype)
        if self._norm_for is None or self._norm_for[0] is not weights:
            per_channel = weights.D.detach().float().repeat_interleave(spec.head_dim).contiguous()
            self._norm_for = (weights, per_channel, weights.norm_weight.detach().float().contiguous())
        _, D, norm = self._norm_for
        T, DI = y.shape[0], spec.d_inner
        out = torch.empty(T, DI)
        _prefill.gated_norm(y.data_ptr(), y.stride(0), x.data_ptr(), x.stride(0), D.data_ptr(), z.data_ptr(),
                            z.stride(0), norm.data_ptr(), DI, DI // spec.n_groups, float(spec.norm_eps),
                            out.data_ptr(), DI, T)
        return out if dtype == torch.float32 else out.to(dtype)


def _row_contiguous(t: torch.Tensor) -> bool:
    """float32, rows at any stride, everything within a row contiguous (as the kernels read them)."""
    if t.dtype != torch.float32:
        return False
    stride = 1
    for size, step in zip(reversed(t.shape[1:]), reversed(t.stride()[1:])):
        if size > 1 and step != stride:
            return False
        stride *= size
    return True
