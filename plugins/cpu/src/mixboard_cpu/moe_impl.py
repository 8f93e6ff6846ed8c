"""The ``moe_cpu`` impl: ``moe_torch``'s routing and combine, each expert's products on panels.

``load`` re-lays every expert's gate/up (gated panels: the SwiGLU gate is
applied per tile, no [rows, 2 x I] intermediate) and down weight as panels,
once, into two tensors. ``forward`` routes in float32, sorts the step's
(token, expert) pairs by expert once, and calls the kernel twice per expert
with rows, on those rows where they lie in the sorted copy."""

from __future__ import annotations

import torch

from mixboard.ops.huge_pages import huge_pages
from mixboard.torch_ops.moe import MoETorchImpl

from . import _panels  # noqa: E402  (after torch: the kernel then shares torch's OpenMP runtime)
from .panels import gated_panels, to_panels


class MoECpuImpl(MoETorchImpl):
    up_panels = down_panels = None  # None: moe_torch's code (a layer that is not float32)

    def load(self, weights) -> None:
        super().load(weights)
        if self.dtype != torch.float32:  # moe_cpu declares float32 only; keep moe_torch's code for the rest
            return
        spec = self.spec
        self.up_panels = _stacked(weights.gate_up, (lambda w: gated_panels(w, spec.intermediate_size))
                                  if spec.gated else to_panels)
        self.down_panels = _stacked(weights.down, to_panels)
        self.gate_up = self.down = None  # the panels are the experts' weights now

    def run_experts(self, x, experts):
        if x.dtype != torch.float32 or self.up_panels is None:
            return super().run_experts(x, experts)
        spec, k = self.spec, self.spec.top_k
        h, inner = spec.hidden_size, spec.intermediate_size
        flat = experts.reshape(-1)
        order = flat.argsort(stable=True)  # the pairs grouped by expert
        counts = torch.bincount(flat, minlength=spec.num_experts).tolist()
        rows = x[order // k]  # contiguous float32 [T * k, hidden]
        out = torch.empty_like(rows)
        inner_rows = torch.empty(rows.shape[0], inner)
        up, down = self.up_panels, self.down_panels
        up_kernel = _panels.gated_linear if spec.gated else _panels.linear
        x_at, mid_at, out_at = rows.data_ptr(), inner_rows.data_ptr(), out.data_ptr()
        start = 0
        for e, n in enumerate(counts):
            if not n:
                continue
            mid = mid_at + 4 * start * inner
            up_kernel(x_at + 4 * start * h, n, h, h, up[e].data_ptr(), inner, 0, mid, inner)
            if not spec.gated:
                chunk = inner_rows[start:start + n]
                torch.relu_(chunk).square_()
            _panels.linear(mid, n, inner, inner, down[e].data_ptr(), h, 0, out_at + 4 * start * h, h)
            start += n
        unsorted = torch.empty_like(out)
        unsorted[order] = out
        return unsorted


def _stacked(weights: torch.Tensor, lay) -> torch.Tensor:
    """Every expert's [rows, in] weight laid by ``lay``, side by side in one tensor [experts, *panels]."""
    first = lay(weights[0])
    stored = huge_pages(torch.empty(weights.shape[0], *first.shape))
    stored[0].copy_(first)
    for e in range(1, weights.shape[0]):
        stored[e].copy_(lay(weights[e]))
    return stored
