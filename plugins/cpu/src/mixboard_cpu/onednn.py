"""oneDNN's float32 product, as torch ships it (``torch.ops.mkldnn``): what
``linear_onednn`` and ``embedding_onednn`` share. Pure Python: it serves where
the plugin's C kernels did not build."""

from __future__ import annotations

import torch


def usable() -> bool:
    """Whether this torch build has oneDNN and it is switched on (torch.backends.mkldnn)."""
    return torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled


def pack(weight: torch.Tensor) -> torch.Tensor:
    """[out, in] reordered once into oneDNN's blocked layout (only oneDNN's product reads it)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight, None)


def column_major(weight: torch.Tensor) -> torch.Tensor:
    """The same [out, in] matrix stored transposed (strides (1, out)): a tied
    table's one-row LM-head product then streams rows of the stored matrix
    into one output row that stays in cache, and its lookups stay plain
    (strided) reads. oneDNN takes it as it is, no packed second copy."""
    if weight.stride() == (1, weight.shape[0]):
        return weight
    return weight.t().contiguous().t()


def product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x @ weight.T + bias, weight packed (``pack``) or plain (any strides)."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
