"""``rotary_torch``: rotate-half rotary embedding from a cos/sin table.

Every attention layer of a model calls the one op with the same step's
positions: the rows of the table are gathered once per positions tensor
and reused until a new one comes."""

from __future__ import annotations

import torch

from ..dtypes import torch_dtype
from ..kinds.rotary import RotaryImpl
from ..ops.rope import cos_sin


class RotaryTorchImpl(RotaryImpl):
    def __init__(self, spec):
        self.spec = spec
        self.dtype = torch_dtype(spec.dtype)
        self._cos = self._sin = None
        self._positions = self._rows = None

    def forward(self, positions, q, k):
        if positions is not self._positions:
            self._rows = self._gather(positions)
            self._positions = positions
        cos, sin = self._rows
        return self._rotate(q, cos, sin), self._rotate(k, cos, sin)

    def _gather(self, positions):
        need = int(positions.max()) + 1 if positions.numel() else 1
        if self._cos is None or self._cos.shape[0] < need or self._cos.device != positions.device:
            length = max(need, 2 * (0 if self._cos is None else self._cos.shape[0]), 256)
            self._cos, self._sin = cos_sin(self.spec, length, self.dtype, positions.device)
        return self._cos[positions].unsqueeze(1), self._sin[positions].unsqueeze(1)

    def _rotate(self, x, cos, sin):
        dim = self.spec.dim
        part = x if dim == x.shape[-1] else x[..., :dim]
        t, h, _ = part.shape
        swapped = part.reshape(t, h, 2, dim // 2).flip(2).view(t, h, dim)
        rotated = torch.addcmul(part * cos, swapped, sin)
        return rotated if dim == x.shape[-1] else torch.cat([rotated, x[..., dim:]], -1)
