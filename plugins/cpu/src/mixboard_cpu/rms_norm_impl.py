"""The ``rms_norm_cpu`` impl: one kernel call; ``rms_norm_torch``'s code
where an input is not what the kernel reads (not float32, or an add over
heads rather than rows)."""

from __future__ import annotations

import torch

from mixboard.torch_ops.rms_norm import RMSNormTorchImpl

from . import _rows  # noqa: E402  (after torch: the kernel then shares torch's OpenMP runtime)


class RMSNormCpuImpl(RMSNormTorchImpl):
    def load(self, weights) -> None:
        self.weight = weights.weight.detach().float().contiguous()
        self._weight = self.weight.data_ptr()

    def forward(self, x, residual):
        dim = self.spec.hidden_size
        if x.dtype != torch.float32 or x.shape[-1] != dim or x.stride(-1) != 1:
            return super().forward(x, residual)
        if residual is None:
            return self._norm(x), x
        if (x.dim() != 2 or residual.dtype != torch.float32 or residual.shape != x.shape
                or residual.stride(-1) != 1 or residual.data_ptr() == x.data_ptr()):
            return super().forward(x, residual)
        # residual += x where it lies (the kind hands the residual over), then the norm of the sum: one pass
        y = torch.empty(x.shape[0], dim)
        _rows.add_rms_norm(residual.data_ptr(), x.shape[0], dim, residual.stride(0), x.data_ptr(), x.stride(0),
                           self._weight, y.data_ptr(), dim, self.spec.eps)
        return y, residual

    def _norm(self, s):
        if s.dtype != torch.float32 or s.stride(-1) != 1 or s.shape[-1] != self.spec.hidden_size:
            return super()._norm(s)
        dim = self.spec.hidden_size
        if s.dim() == 3 and s.stride(1) == dim:  # heads of a fused product, [T, heads, D], read where they lie
            y = torch.empty(s.shape)
            _rows.rms_norm(s.data_ptr(), s.shape[0], s.shape[1], s.stride(0), dim, self._weight, y.data_ptr(),
                           s.shape[1] * dim, self.spec.eps)
            return y
        rows = s if s.dim() == 2 else s.reshape(-1, dim)
        if rows.stride(-1) != 1:
            rows = rows.contiguous()
        y = torch.empty(rows.shape[0], dim)
        _rows.rms_norm(rows.data_ptr(), rows.shape[0], 1, rows.stride(0), dim, self._weight, y.data_ptr(), dim,
                       self.spec.eps)
        return y if rows is s else y.view(s.shape)
