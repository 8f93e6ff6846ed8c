"""The ``linear_cpu`` impl: ``load`` re-lays the weight as panels once
(``panels.py``); ``forward`` is one call of the kernel."""

from __future__ import annotations

from mixboard import LinearImpl

from . import _panels  # noqa: E402  (after torch: the kernel then shares torch's OpenMP runtime)
from .panels import gated_panels, product, to_panels


class LinearCpuImpl(LinearImpl):
    def __init__(self, spec):
        self.spec = spec
        self._kernel = _panels.gated_linear if spec.gated else _panels.linear

    def load(self, weights) -> None:
        weight, out = weights.weight.detach(), self.spec.out_features
        self.panels = gated_panels(weight, out) if self.spec.gated else to_panels(weight)
        self.bias = None if weights.bias is None else weights.bias.detach().float().contiguous()
        self._bias = 0 if self.bias is None else self.bias.data_ptr()

    def forward(self, x):
        return product(self._kernel, x, self.panels, self.spec.out_features, self._bias)
