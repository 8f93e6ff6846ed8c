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

from . import _panels  # noqa: E402  (after torch: the kernel then shares torch's OpenMP runtime)

PANEL = _panels.PANEL
HUGE_PAGES_FROM = 4 << 20  # bytes: smaller tensors hold at most one whole 2 MB page


def isa() -> str:
    """The instruction set the products run here: avx512, avx2 or generic."""
    return _panels.isa()


def huge_pages(t: torch.Tensor) -> torch.Tensor:
    """``t``, its memory backed by 2 MB pages where the OS allows it (Linux
    transparent huge pages), so a streamed weight crosses a page every 2 MB
    instead of every 4 KB; call before ``t`` is first written."""
    size = t.numel() * t.element_size()
    if t.device.type == "cpu" and size >= HUGE_PAGES_FROM:
        _panels.huge_pages(t.data_ptr(), size)
    return t


class PanelLayout:
    """How a 2-D tensor is written into panels 16 rows at a time (a loader
    can read a checkpoint's tensor straight into them, chunk by chunk)."""

    rows_multiple = PANEL

    @staticmethod
    def stored_shape(rows: int, cols: int) -> tuple[int, int, int]:
        return (-(-rows // PANEL), cols, PANEL)

    @staticmethod
    def empty(rows: int, cols: int, dtype: torch.dtype = torch.float32, pairs: int = 1) -> torch.Tensor:
        """Panels for ``rows`` rows; ``pairs=2``: [panels, 2, cols, 16], two weights' panels interleaved."""
        panels, _, _ = PanelLayout.stored_shape(rows, cols)
        stored = huge_pages(torch.empty(panels, pairs, cols, PANEL, dtype=dtype))  # before it is written
        if rows % PANEL:
            stored[-1].zero_()  # the padding of the last panel must be zero
        return stored if pairs > 1 else stored[:, 0]

    @staticmethod
    def write(stored: torch.Tensor, first: int, chunk: torch.Tensor) -> None:
        """Rows ``first`` to ``first + len(chunk)`` of the matrix (``first`` a multiple of 16)."""
        n, cols = chunk.shape
        whole = n // PANEL * PANEL
        p = first // PANEL
        if whole:
            stored[p:p + whole // PANEL].copy_(chunk[:whole].reshape(-1, PANEL, cols).transpose(1, 2))
        if n > whole:  # the matrix's last rows: a panel of their own, zero-padded
            stored[p + whole // PANEL, :, :n - whole].copy_(chunk[whole:].t())


def to_panels(weight: torch.Tensor) -> torch.Tensor:
    """[out, in] -> float32 panels [ceil(out / 16), in, 16], a new tensor."""
    stored = PanelLayout.empty(*weight.shape)
    PanelLayout.write(stored, 0, weight)
    return stored


def gated_panels(weight: torch.Tensor, out_features: int) -> torch.Tensor:
    """[2 x out, in] (gate's rows, then up's) -> [2 x ceil(out / 16), in, 16]: gate's panel p, then up's."""
    both = PanelLayout.empty(out_features, weight.shape[1], pairs=2)
    PanelLayout.write(both[:, 0], 0, weight[:out_features])
    PanelLayout.write(both[:, 1], 0, weight[out_features:])
    return both.flatten(0, 1)


def from_panels(panels: torch.Tensor, out_features: int) -> torch.Tensor:
    """The [out, in] matrix back (for tests)."""
    return panels.transpose(1, 2).reshape(-1, panels.shape[1])[:out_features]


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
