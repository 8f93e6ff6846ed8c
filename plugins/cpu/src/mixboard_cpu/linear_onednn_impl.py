"""The ``linear_onednn`` impl: the weight laid out at ``load`` as the backend's ``layout``
option says; F.linear where this torch has no oneDNN (or it is switched off) when the
layer is loaded."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mixboard import LinearImpl

from . import onednn


class LinearOneDnnImpl(LinearImpl):
    def __init__(self, spec, layout: str = "packed"):
        self.spec = spec
        self.layout = layout  # packed | as_loaded | column_major (LinearOneDnn.options)

    def load(self, weights) -> None:
        weight = weights.weight.detach().float()
        self.bias = None if weights.bias is None else weights.bias.detach().float()
        self.onednn = onednn.usable()
        if self.layout == "column_major":  # F.linear and oneDNN both take the strided matrix as it is
            weight = onednn.column_major(weight)
        elif self.layout == "packed" and self.onednn:  # only oneDNN's product reads the blocked layout
            weight = onednn.pack(weight)
        self.weight = weight

    def forward(self, x):
        if x.dtype != torch.float32:
            x = x.float()
        y = onednn.product(x, self.weight, self.bias) if self.onednn else F.linear(x, self.weight, self.bias)
        if not self.spec.gated:
            return y
        gate, up = y.split(self.spec.out_features, dim=-1)
        return F.silu(gate) * up
