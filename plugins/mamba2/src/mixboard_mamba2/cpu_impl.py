"""The ``mamba2_cpu`` impl: ``mamba2_torch``'s, with the prefills' SSD scan
run by the C kernel (``_ssd_prefill.c``) in one call per step."""

from __future__ import annotations

import torch

from .torch_impl import Mamba2TorchImpl

from . import _ssd_prefill  # noqa: E402  (after torch: the kernel then shares torch's OpenMP runtime)


class Mamba2CpuImpl(Mamba2TorchImpl):
    def _prefills(self, step, x, dts, A, B, C, ssm_pool, y) -> None:
        if not (ssm_pool.dtype == torch.float32 and ssm_pool.is_contiguous() and y.is_contiguous()
                and _rows(x) and _rows(B) and _rows(C) and _rows(dts) and B.stride(0) == C.stride(0)):
            return super()._prefills(step, x, dts, A, B, C, ssm_pool, y)
        spec = self.spec
        runs = torch.tensor([[p.start, p.end, p.slot, int(p.continues)] for p in step.prefills], dtype=torch.int64)
        A = A.contiguous()
        _ssd_prefill.prefill(x.data_ptr(), x.stride(0), B.data_ptr(), C.data_ptr(), B.stride(0), dts.data_ptr(),
                             dts.stride(0), A.data_ptr(), spec.num_heads, spec.head_dim, spec.n_groups, spec.d_state,
                             ssm_pool.data_ptr(), y.data_ptr(), y.stride(0), runs.data_ptr(), len(runs))


def _rows(t: torch.Tensor) -> bool:
    """Rows at any stride, everything within a row contiguous (as the kernel reads them)."""
    if t.dtype != torch.float32:
        return False
    stride = 1
    for size, step in zip(reversed(t.shape[1:]), reversed(t.stride()[1:])):
        if size > 1 and step != stride:
            return False
        stride *= size
    return True
