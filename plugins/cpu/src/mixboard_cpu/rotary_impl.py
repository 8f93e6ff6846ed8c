"""The ``rotary_cpu`` impl: the kernel rotates q and k where they lie, from
a float32 cos/sin table (``mixboard.ops.rope.cos_sin``: sin with its first
half negated, the kernel's convention) grown on demand; ``rotary_torch``'s
code where an input is not what the kernel reads."""

from __future__ import annotations

import torch

from mixboard.ops.rope import cos_sin
from mixboard.torch_ops.rotary import RotaryTorchImpl

from . import _rows  # noqa: E402  (after torch: the kernel then shares torch's OpenMP runtime)


class RotaryCpuImpl(RotaryTorchImpl):
    _table = None  # (cos, sin) [rows, rotary_dim], float32
    _seen = None   # the last positions object, and its int64 contiguous copy (the kind allows the reuse)

    def forward(self, positions, q, k):
        if not self._reads(positions, q, k):
            return super().forward(positions, q, k)
        if not positions.numel():
            return q, k
        pos = self._positions_of(positions)
        cos, sin = self._table
        if q.stride() == k.stride() and k.data_ptr() == q.data_ptr() + 4 * q.shape[1] * q.stride(1):
            self._in_place(q, q.shape[1] + k.shape[1], pos, cos, sin)  # k's heads follow q's: one call for both
        else:
            self._in_place(q, q.shape[1], pos, cos, sin)
            self._in_place(k, k.shape[1], pos, cos, sin)
        return q, k

    def _positions_of(self, positions):
        if self._seen is None or self._seen[0] is not positions:
            need = int(positions.max()) + 1
            if self._table is None or self._table[0].shape[0] < need:
                length = max(need, 2 * (0 if self._table is None else self._table[0].shape[0]), 256)
                self._table = cos_sin(self.spec, length, torch.float32, "cpu")
            self._seen = (positions, positions.contiguous())
        return self._seen[1]

    def _in_place(self, x, heads, pos, cos, sin):
        _rows.rotary(x.data_ptr(), x.shape[0], heads, x.stride(0), x.stride(1), self.spec.dim, cos.data_ptr(),
                     sin.data_ptr(), cos.stride(0), cos.shape[0], pos.data_ptr())

    def _reads(self, positions, q, k) -> bool:
        """Whether the kernel reads these: float32 heads [T, heads, head_size], channels contiguous; int64 positions."""
        d = self.spec.head_size
        return (q.dtype == k.dtype == torch.float32 and positions.dtype == torch.int64 and q.dim() == k.dim() == 3
                and q.shape[2] == k.shape[2] == d and q.stride(2) == k.stride(2) == 1
                and q.shape[0] == k.shape[0] == positions.shape[0])
