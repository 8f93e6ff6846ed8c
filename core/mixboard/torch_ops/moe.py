"""``moe_torch``: route in float32, then one product pair per expert over the rows that chose it.

The step's (token, expert) pairs are sorted by expert once; each expert with
rows runs its two products on them in the layer's dtype (a Python loop over
experts, never over tokens); the results go back to their tokens and are
summed with the routing weights in float32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..dtypes import torch_dtype
from ..kinds.moe import MoEImpl


def route(spec, logits: torch.Tensor, selection_bias: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(experts [T, top_k] int64, weights [T, top_k] float32) of float32 router logits [T, E], as the kind
    defines them. A stable descending sort gives the lower expert index first on equal values on every
    device (torch.topk promises no order among equals)."""
    if spec.gating == "softmax_topk":
        scores = logits.softmax(-1)
    elif spec.gating == "sigmoid_topk":
        scores = logits.sigmoid()
    else:
        scores = logits
    choice = scores if selection_bias is None else scores + selection_bias
    experts = choice.sort(dim=-1, descending=True, stable=True).indices[:, :spec.top_k]
    weights = scores.gather(1, experts)
    if spec.gating == "topk_softmax":
        weights = weights.softmax(-1)
    if spec.normalize_topk:
        weights = weights / weights.sum(-1, keepdim=True)
    if spec.routed_scaling != 1.0:
        weights = weights * spec.routed_scaling
    return experts, weights


class MoETorchImpl(MoEImpl):
    def __init__(self, spec):
        self.spec = spec
        self.dtype = torch_dtype(spec.dtype)

    def load(self, weights) -> None:
        # the router in float32 (a copy only in a half-precision layer: [E, hidden], small)
        self.router = None if weights.router is None else weights.router.float()  # None: logits_input
        self.router_bias = None if weights.router_bias is None else weights.router_bias.float()
        self.selection_bias = None if weights.selection_bias is None else weights.selection_bias.float()
        self.gate_up, self.down = weights.gate_up, weights.down

    def forward(self, x, logits=None):
        experts, weights = self.route(x, logits)
        return self.combine(self.run_experts(x, experts), experts, weights, x.dtype)

    def route(self, x, logits=None):
        """(experts, weights) of rows x; with logits_input, of the caller's router logits."""
        if self.spec.logits_input:
            if logits is None:
                raise ValueError(f"{self.layer_name}: this moe layer takes the router logits (logits_input): "
                                 "call forward(x, logits)")
            logits = logits.float()
        else:
            logits = F.linear(x.float(), self.router, self.router_bias)
        return route(self.spec, logits, self.selection_bias)

    def run_experts(self, x, experts):
        """[T * top_k, hidden]: row i * top_k + j is expert experts[i, j]'s output for token i."""
        k = self.spec.top_k
        flat = experts.reshape(-1)
        order = flat.argsort(stable=True)  # the pairs grouped by expert
        counts = torch.bincount(flat, minlength=self.spec.num_experts).tolist()
        rows = x[order // k]
        out = torch.empty_like(rows)
        start = 0
        for e, n in enumerate(counts):
            if n:
                out[start:start + n] = self.expert(e, rows[start:start + n])
                start += n
        unsorted = torch.empty_like(out)
        unsorted[order] = out
        return unsorted

    def expert(self, e: int, rows):
        h = F.linear(rows, self.gate_up[e])
        if self.spec.gated:
            gate, up = h.split(self.spec.intermediate_size, dim=-1)
            h = F.silu(gate) * up
        else:
            h = torch.relu(h).square()
        return F.linear(h, self.down[e])

    def combine(self, out, experts, weights, dtype):
        """Each token's top_k outputs summed with their weights, in float32."""
        # the width spelt out: a step with no rows (a last block whose prompts all go on) has nothing to infer -1 from
        t, k = experts.shape
        y = torch.bmm(weights.unsqueeze(1), out.view(t, k, out.shape[-1]).float()).squeeze(1)
        return y.to(dtype)
