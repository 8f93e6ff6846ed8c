"""Projections prepared for inference once the weights are loaded.

Two changes, both exact up to float32 summation order:

- ``fuse``: projections that read the same input (q/k/v, gate/up) become one
  product with the weights concatenated: one call instead of two or three,
  and each call's fixed cost is a large part of a small model's decode step.
- on CPU in float32, the product runs on the runner's own kernel with the
  weight stored as panels (``panels.PanelLinear``), or, where that kernel is
  not built, through oneDNN with the weight reordered once into its blocked
  layout (``OneDnnLinear``). Measured here (2 threads, benchmarks/README.md),
  torch's default ``F.linear`` streams thin products (decode: 1 to 16 rows)
  at 3-8 GB/s; oneDNN packed runs the llama benchmark's shapes 1.1-2.9x
  faster, and the panels another 1.2-1.6x at one row.

A tied table (embedding and LM head, one tensor) is stored once in the
layout its products want: panels, or for oneDNN transposed (``column_major``).
"""

from __future__ import annotations

import torch
from torch import nn

from . import panels


def fuse(*linears: nn.Linear) -> nn.Linear:
    """One Linear computing ``cat([l(x) for l in linears], -1)``."""
    first = linears[0]
    fused = nn.Linear(first.in_features, sum(l.out_features for l in linears), bias=first.bias is not None,
                      device="meta")
    fused.weight = nn.Parameter(torch.cat([l.weight.detach() for l in linears]), requires_grad=False)
    if first.bias is not None:
        fused.bias = nn.Parameter(torch.cat([l.bias.detach() for l in linears]), requires_grad=False)
    return fused


def onednn_serves(device: torch.device | str, dtype: torch.dtype) -> bool:
    """Whether products of this device and dtype go through oneDNN (``OneDnnLinear``)."""
    return (torch.device(device).type == "cpu" and dtype == torch.float32
            and torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled)


def on_onednn(weight: torch.Tensor) -> bool:
    return weight.dim() == 2 and onednn_serves(weight.device, weight.dtype)


def products(device: torch.device | str, dtype: torch.dtype) -> str:
    """What runs this device's and dtype's projections, in words (``mixboard run`` prints it)."""
    if panels.serves(device, dtype):
        return f"mixboard panels ({panels.isa()})"
    if onednn_serves(device, dtype):
        return f"oneDNN packed ({panels.UNAVAILABLE})" if panels.UNAVAILABLE else "oneDNN packed"
    return "torch F.linear"


def table_layout(device: torch.device | str, dtype: torch.dtype):
    """How a tied table is stored for this device and dtype: ``panels.PanelLayout``,
    ``ColumnMajor`` (oneDNN), or None (as loaded)."""
    if panels.serves(device, dtype):
        return panels.PanelLayout
    return ColumnMajor if onednn_serves(device, dtype) else None


def column_major(weight: torch.Tensor) -> torch.Tensor:
    """The same [out, in] matrix, stored transposed (strides (1, out)).

    For a tied table: the LM head's one-row product (every batch-1 decode
    step) then streams rows of the stored [in, out] matrix into one output
    row that stays in cache: measured here, 32000 x 512 at 1 row 3.1 ms
    instead of 4.9 ms, no slower at 2-64 rows than the row-major table
    (benchmarks/README.md). The embedding lookup reads strided columns:
    ~5 us a token, a fraction of a percent of a prefill. The loader reads
    such a table straight into this layout (weights_file.read_tensors)."""
    if weight.stride() == (1, weight.shape[0]):
        return weight
    return weight.t().contiguous().t()


class ColumnMajor:
    """How the loader reads a 2-D tensor straight into column-major storage,
    a few rows at a time (weights_file.read_tensors)."""

    rows_multiple = 1

    @staticmethod
    def stored_shape(rows: int, cols: int) -> tuple[int, int]:
        return (rows, cols)

    @staticmethod
    def empty(rows: int, cols: int, dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(cols, rows, dtype=dtype).t()

    @staticmethod
    def write(stored: torch.Tensor, first: int, chunk: torch.Tensor) -> None:
        stored[first:first + chunk.shape[0]].copy_(chunk)

    relay = staticmethod(column_major)


class OneDnnLinear(nn.Module):
    """``F.linear`` through oneDNN (CPU, float32 only), the weight reordered
    once into oneDNN's blocked layout, or kept as it is where another module
    shares it (a tied LM head reads the embedding table, stored by
    ``column_major``: a packed copy would add the whole table to peak memory
    for ~15 % at 16 rows and nothing at one row)."""

    def __init__(self, linear: nn.Linear, pack: bool = True):
        super().__init__()
        self.in_features, self.out_features, self.packed = linear.in_features, linear.out_features, pack
        weight = linear.weight.detach()
        self.weight = torch.ops.mkldnn._reorder_linear_weight(weight, None) if pack else weight
        self.bias = None if linear.bias is None else linear.bias.detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        layout = "oneDNN blocked" if self.packed else "shared, as loaded"
        return f"in_features={self.in_features}, out_features={self.out_features}, weight={layout}"


def pack_linears(module: nn.Module) -> None:
    """Re-lay every float32 CPU ``nn.Linear`` below ``module`` for its
    products (panels, else oneDNN), one at a time, so that each original is
    freed as its copy is made. A weight that another module shares (a tied
    table) is used by oneDNN as it is stored, never copied; a model on panels
    shares its table as panels itself (``CausalLM.finalize``)."""
    shared = {id(p) for m in module.modules() if not isinstance(m, nn.Linear) for p in m.parameters(recurse=False)}
    parents = [m for m in module.modules() if any(type(c) is nn.Linear for c in m.children())]
    for parent in parents:
        names = [name for name, child in parent.named_children() if type(child) is nn.Linear]
        for name in names:
            child = getattr(parent, name)
            if id(child.weight) in shared:  # used as it is stored: no second copy of a table
                if on_onednn(child.weight):
                    setattr(parent, name, OneDnnLinear(child, pack=False))
            elif child.weight.dim() == 2 and panels.serves(child.weight.device, child.weight.dtype):
                setattr(parent, name, panels.PanelLinear.of(child))
            elif on_onednn(child.weight):
                setattr(parent, name, OneDnnLinear(child))
            del child
