"""Projections through the runner's own CPU kernel (``_cpu_kernels.c``).

A weight ``[out, in]`` is stored once as *panels* of 16 output rows,
``[ceil(out / 16), in, 16]`` (the last panel zero-padded): panel ``p`` holds
``W[16 p + j, k]`` at ``[p, k, j]``. The kernel streams each panel once per
call and adds 16 consecutive weights times one input value into 16
consecutive outputs. Measured here (benchmarks/README.md,
``bench_linear.py``), a one-row product, every batch-1 decode step, is
1.2-1.6x faster than oneDNN's with the weight packed; at 16 rows (x packed
in tiles first) 1.2-1.5x; at 256 rows 0.90-1.01x.

A tied table (embedding and LM head) is stored as panels too, once:
``PanelEmbedding`` looks rows up in it, ``PanelLinear`` projects with it.

The kernel is optional (``kernels.py``): where it is not built,
``UNAVAILABLE`` says why and the runner keeps oneDNN's products (``linear.py``).
"""

from __future__ import annotations

import torch
from torch import nn

from ..kernels import UNAVAILABLE, huge_pages, native, serves  # noqa: F401  (serves: whether products run on panels)

PANEL = 16


def isa() -> str | None:
    """The instruction set the kernel runs here (avx512, avx2, generic), None if not built."""
    return None if native is None else native.isa()


def to_panels(weight: torch.Tensor) -> torch.Tensor:
    """[out, in] -> [ceil(out / 16), in, 16], a new tensor (the loader's layout, written in one piece)."""
    stored = PanelLayout.empty(*weight.shape, weight.dtype)
    PanelLayout.write(stored, 0, weight)
    return stored


def from_panels(panels: torch.Tensor, out_features: int) -> torch.Tensor:
    """The [out, in] matrix back (for tests)."""
    return panels.transpose(1, 2).reshape(-1, panels.shape[1])[:out_features]


class PanelLayout:
    """How the loader reads a 2-D tensor straight into panels, 16 rows at a
    time (weights_file.read_tensors), without holding it twice."""

    rows_multiple = PANEL

    @staticmethod
    def stored_shape(rows: int, cols: int) -> tuple[int, int, int]:
        return (-(-rows // PANEL), cols, PANEL)

    @staticmethod
    def empty(rows: int, cols: int, dtype: torch.dtype) -> torch.Tensor:
        stored = huge_pages(torch.empty(PanelLayout.stored_shape(rows, cols), dtype=dtype))  # before it is written
        if rows % PANEL:
            stored[-1].zero_()  # the padding of the last panel must be zero
        return stored

    @staticmethod
    def write(stored: torch.Tensor, first: int, chunk: torch.Tensor) -> None:
        n, cols = chunk.shape
        whole = n // PANEL * PANEL
        p = first // PANEL
        if whole:
            stored[p:p + whole // PANEL].copy_(chunk[:whole].reshape(-1, PANEL, cols).transpose(1, 2))
        if n > whole:  # the table's last rows: a panel of its own, zero-padded
            stored[p + whole // PANEL, :, :n - whole].copy_(chunk[whole:].t())

    relay = staticmethod(to_panels)


class PanelLinear(nn.Module):
    """``F.linear`` on a weight stored as panels (CPU, float32); or, made by
    ``gated``, SwiGLU's ``silu(gate(x)) * up(x)`` in one product."""

    def __init__(self, in_features: int, out_features: int, panels: torch.Tensor, bias: torch.Tensor | None,
                 gated: bool = False):
        super().__init__()
        self.in_features, self.out_features, self.is_gated = in_features, out_features, gated
        self.panels = panels
        self.bias = None if bias is None else bias.detach().contiguous()
        self._product = native.gated_linear if gated else native.linear

    @classmethod
    def of(cls, linear: nn.Linear) -> "PanelLinear":
        return cls(linear.in_features, linear.out_features, to_panels(linear.weight.detach()), linear.bias)

    @classmethod
    def gated(cls, gate: nn.Linear, up: nn.Linear) -> "PanelLinear":
        """silu(gate(x)) * up(x): the panels of gate and up interleaved, so the
        kernel gates each pair of tiles as it makes them (no [rows, 2 x out]
        intermediate, no silu and multiply over it)."""
        first = to_panels(gate.weight.detach())
        both = huge_pages(torch.empty(first.shape[0], 2, *first.shape[1:], dtype=first.dtype))
        both[:, 0] = first
        both[:, 1] = to_panels(up.weight.detach())
        bias = None if gate.bias is None else torch.cat([gate.bias.detach(), up.bias.detach()])
        return cls(gate.in_features, gate.out_features, both.flatten(0, 1), bias, gated=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 2 and x.shape[1] == self.in_features and x.stride(1) == 1 and x.dtype == torch.float32:
            return self._rows(x)  # what the model passes: no reshape, no view (~2 us of a 16-row step's call)
        x2 = x.reshape(-1, self.in_features)
        if x2.stride(-1) != 1 or x2.dtype != torch.float32:
            x2 = x2.contiguous().float()
        return self._rows(x2).view(*x.shape[:-1], self.out_features)

    def _rows(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.shape[0]
        y = torch.empty(rows, self.out_features)
        if rows:
            self._product(x.data_ptr(), rows, self.in_features, x.stride(0), self.panels.data_ptr(),
                          self.out_features, 0 if self.bias is None else self.bias.data_ptr(), y.data_ptr(),
                          self.out_features)
        return y

    def extra_repr(self) -> str:
        what = "silu(gate) * up, " if self.is_gated else ""
        return f"in_features={self.in_features}, out_features={self.out_features}, {what}weight=panels of {PANEL}"


class PanelEmbedding(nn.Module):
    """Row lookup in a table stored as panels: row t is ``panels[t // 16, :, t % 16]``
    (strided reads of 16 floats' stride, ~a few us a token)."""

    def __init__(self, panels: torch.Tensor, num_embeddings: int):
        super().__init__()
        self.panels, self.num_embeddings = panels, num_embeddings

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.panels[ids // PANEL, :, ids % PANEL]

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.panels.shape[1]}, table=panels of {PANEL}"
