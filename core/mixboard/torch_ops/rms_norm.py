"""``rms_norm_torch``: the residual add, then RMSNorm with float32 statistics."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..dtypes import torch_dtype
from ..kinds.rms_norm import RMSNormImpl


class RMSNormTorchImpl(RMSNormImpl):
    def __init__(self, spec):
        self.spec = spec
        self.dtype = torch_dtype(spec.dtype)

    def load(self, weights) -> None:
        self.weight = weights.weight

    def forward(self, x, residual):
        if residual is None:
            s = x
        elif self.spec.residual_fp32:
            s = x.float() + residual
        else:
            s = x + residual
        return self._norm(s), s

    def _norm(self, s):
        if s.dtype == self.dtype == torch.float32:  # the same arithmetic in one call
            return F.rms_norm(s, self.weight.shape, self.weight, self.spec.eps)
        sf = s.float()
        sf = sf * torch.rsqrt(sf.pow(2).mean(-1, keepdim=True) + self.spec.eps)
        return self.weight * sf.to(self.dtype)
