"""The ``linear_onednn`` impl: the weight packed at ``load``; F.linear where
this torch has no oneDNN (or it is switched off) when the layer is loaded."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mixboard import LinearImpl

from . import onednn


class LinearOneDnnImpl(LinearImpl):
    def __init__(self, spec):
        self.spec = spec

    def load(self, weights) -> None:
        weight = weights.weight.detach().float()
        self.bias = None if weights.bias is None else weights.bias.detach().float()
        self.packed = onednn.usable()
        self.weight = onednn.pack(weight) if self.packed else weight

    def forward(self, x):
        if x.dtype != torch.float32:
            x = x.float()
        y = onednn.product(x, self.weight, self.bias) if self.packed else F.linear(x, self.weight, self.bias)
        if not self.spec.gated:
            return y
        gate, up = y.split(self.spec.out_features, dim=-1)
        return F.silu(gate) * up
