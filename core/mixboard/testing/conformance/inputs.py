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
    projection's output are (``xz[:, :d_inner]``, ``qkv[:, :q_size]``)."""
    out = {}
    for name, t in inputs.items():
        if layout != STRIDED:
            out[name] = t.to(device, copy=True)  # never the oracle's own tensor
            continue
        rows, width = t.shape[0], t[0].numel()
        buffer = torch.full((rows, width + 5), float("nan"), dtype=t.dtype, device=device)
        view = buffer[:, 3:3 + width].view(t.shape)
        view.copy_(t)
        out[name] = view
    return out
