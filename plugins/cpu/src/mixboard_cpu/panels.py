"""The panel layout of a weight, and the products on it (``_panels.c``).

A weight ``[out, in]`` is stored once as panels of 16 output rows,
``[ceil(out / 16), in, 16]``, the last panel zero-padded: panel ``p`` holds
``W[16 p + j, k]`` at ``[p, k, j]``. The kernel streams each panel once per
call and adds 16 consecutive weights, times one input value, into 16
consecutive outputs. A gated weight (SwiGLU's gate and up) interleaves the
two: gate's panel p, then up's, so the kernel gates each pair of tiles as it
makes them. A tied table is stored as panels too, once, for its lookups and
its LM-head product alike.
"""

from __future__ import annotations

import torch

from mixboard.ops.huge_pages import huge_pages

from . import _panels  # noqa: E402  (after torch: the kernel then shares torch's OpenMP runtime)

PANEL = _panels.PANEL


def isa() -> str:
    """The instruction set the products run here: avx512, avx2 or generic."""
    return _panels.isa()


def to_panels(weight: torch.Tensor) -> torch.Tensor:
    """[out, in] -> float32 panels [ceil(out / 16), in, 16], a new tensor."""
    stored = _empty(*weight.shape, pairs=1)[:, 0]
    _write(stored, weight)
    return stored


def gated_panels(weight: torch.Tensor, out_features: int) -> torch.Tensor:
    """[2 x out, in] (gate's rows, then up's) -> [2 x ceil(out / 16), in, 16]: gate's panel p, then up's."""
    both = _empty(out_features, weight.shape[1], pairs=2)
    _write(both[:, 0], weight[:out_features])
    _write(both[:, 1], weight[out_features:])
    return both.flatten(0, 1)


def _empty(rows: int, cols: int, pairs: int) -> torch.Tensor:
    """[panels, pairs, cols, 16] float32 for ``rows`` rows, the padding of the last panel zero."""
    # huge pages before the first write: pages already touched stay small
    stored = huge_pages(torch.empty(-(-rows // PANEL), pairs, cols, PANEL))
    if rows % PANEL:
        stored[-1].zero_()
    return stored


def _write(stored: torch.Tensor, matrix: torch.Tensor) -> None:
    """The [rows, cols] matrix into its panels [ceil(rows / 16), cols, 16]."""
    n, cols = matrix.shape
    whole = n // PANEL * PANEL
    if whole:
        stored[:whole // PANEL].copy_(matrix[:whole].reshape(-1, PANEL, cols).transpose(1, 2))
    if n > whole:  # the matrix's last rows: a panel of their own, zero-padded
        stored[-1, :, :n - whole].copy_(matrix[whole:].t())


def product(kernel, x: torch.Tensor, panels: torch.Tensor, out_features: int, bias: int = 0) -> torch.Tensor:
    """[..., in] -> [..., out] through ``kernel`` (``_panels.linear`` or ``gated_linear``); bias an address or 0.
    x's rows are read where they lie when they are float32 with channels contiguous."""
    in_features = panels.shape[1]
    if x.shape[-1] != in_features:  # the kernel would read past the rows
        raise ValueError(f"the input has {x.shape[-1]} features; the weight takes {in_features}")
    rows = x if x.dim() == 2 else x.reshape(-1, in_features)
    if rows.dtype != torch.float32 or rows.stride(-1) != 1:
        rows = rows.float().contiguous()
    y = torch.empty(rows.shape[0], out_features)
    if rows.shape[0]:
        kernel(rows.data_ptr(), rows.shape[0], in_features, rows.stride(0), panels.data_ptr(), out_features, bias,
               y.data_ptr(), out_features)
    return y if x.dim() == 2 else y.view(*x.shape[:-1], out_features)
