"""The tensors a case feeds a layer: drawn on the host from the case's seed,
then placed on the backend's device in the case's memory layout."""

from __future__ import annotations

from typing import Any, Mapping

import torch

from .cases import STRIDED


def draw_inputs(shapes: Mapping[str, tuple[tuple[int, ...], float]], num_tokens: int, dtype: torch.dtype,
                gen: torch.Generator) -> dict[str, torch.Tensor]:
    """``randn * scale`` of ``[num_tokens, *shape]`` per input, drawn in float64 and rounded to ``dtype``."""
    return {name: (torch.randn((num_tokens, *shape), generator=gen, dtype=torch.float64) * scale).to(dtype)
            for name, (shape, scale) in shapes.items()}


def place(inputs: Mapping[str, torch.Tensor], device: Any, layout: str) -> dict[str, torch.Tensor]:
    """Copies on ``device``; with the strided layout each is a view into a
    wider buffer (rows padded, a nonzero offset), as the slices of a fused
    projection's output are (``xz[:, :d_inner]``, ``qkv[:, :q_size]``), and
    an input of per-head rows ([T, H, D]) a transpose of a dense [H, T, D]
    after a few poisoned elements: dense, but its heads outermost. Only the
    last dimension's stride is promised; ``empty_like`` of such an input
    keeps its strides, which a kernel writing rows of H * D does not."""
    out = {}
    for name, t in inputs.items():
        if layout != STRIDED:
            out[name] = t.to(device, copy=True)  # never the oracle's own tensor
            continue
        if t.dim() >= 3:
            flat = torch.full((3 + t.numel(),), float("nan"), dtype=t.dtype, device=device)
            view = flat[3:].view(t.shape[1], t.shape[0], *t.shape[2:]).transpose(0, 1)
            view.copy_(t)
            out[name] = view
            continue
        rows, width = t.shape[0], t[0].numel()
        buffer = torch.full((rows, width + 5), float("nan"), dtype=t.dtype, device=device)
        view = buffer[:, 3:3 + width].view(t.shape)
        view.copy_(t)
        out[name] = view
    return out
