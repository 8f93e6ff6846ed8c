"""Projections prepared for inference once the weights are loaded.

Two changes, both exact up to float32 summation order:

- ``fuse``: projections that read the same input (q/k/v, gate/up) become one
  product with the weights concatenated: one pass over the input and one call
  instead of three, which is most of a decode step's cost on small models.
- ``PackedLinear``: on CPU in float32 the weight is reordered once into
  oneDNN's blocked layout. Measured here (2 threads, benchmarks/README.md),
  torch's default ``F.linear`` streams thin products (decode: 1 to 16 rows)
  at 3-8 GB/s; the packed product runs the same shapes about twice as fast.
"""

from __future__ import annotations

import torch
from torch import nn


def fuse(*linears: nn.Linear) -> nn.Linear:
    """One Linear computing ``cat([l(x) for l in linears], -1)``."""
    first = linears[0]
    fused = nn.Linear(first.in_features, sum(l.out_features for l in linears), bias=first.bias is not None,
                      device="meta")
    fused.weight = nn.Parameter(torch.cat([l.weight.detach() for l in linears]), requires_grad=False)
    if first.bias is not None:
        fused.bias = nn.Parameter(torch.cat([l.bias.detach() for l in linears]), requires_grad=False)
    return fused


def _packable(weight: torch.Tensor) -> bool:
    return (weight.device.type == "cpu" and weight.dtype == torch.float32 and weight.dim() == 2
            and torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled)


class PackedLinear(nn.Module):
    """``F.linear`` with the weight in oneDNN's layout (CPU, float32 only)."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), None)
        self.bias = None if linear.bias is None else linear.bias.detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, packed=oneDNN"


def pack_linears(module: nn.Module) -> None:
    """Replace every packable ``nn.Linear`` below ``module`` by a PackedLinear
    (one at a time, so the originals are freed as the copies are made)."""
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear and _packable(child.weight):
                setattr(parent, name, PackedLinear(child))

