"""``linear_torch``: F.linear, any device and dtype."""

from __future__ import annotations

import torch.nn.functional as F

from ..kinds.linear import LinearImpl


class LinearTorchImpl(LinearImpl):
    def __init__(self, spec):
        self.spec = spec

    def load(self, weights) -> None:
        self.weight, self.bias = weights.weight, weights.bias

    def forward(self, x):
        y = F.linear(x, self.weight, self.bias)
        if not self.spec.gated:
            return y
        gate, up = y.split(self.spec.out_features, dim=-1)
        return F.silu(gate) * up
