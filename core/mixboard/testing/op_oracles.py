"""Reference implementations ("oracles") of the dense kinds: linear,
rms_norm, rotary, embedding, argmax, moe. Each is the executable definition of
its kind: obviously correct, float64 inside, the output cast back to the
layer's dtype (the residual sum of rms_norm keeps its own). Interfaces as
the kinds' (``help(mixboard.LinearImpl)``, ...)."""

from __future__ import annotations

import torch

from ..dtypes import torch_dtype
from ..kinds import (
    ArgmaxImpl, ArgmaxSpec, EmbeddingImpl, EmbeddingSpec, LinearImpl, LinearSpec, MoEImpl, MoESpec, RMSNormImpl,
    RMSNormSpec, RotaryImpl, RotarySpec,
)
from ..ops.rope import inv_freq


class _Loaded:
    spec_type: type

    def __init__(self, spec):
        if not isinstance(spec, self.spec_type):
            raise ValueError(f"{type(self).__name__} needs a {self.spec_type.__name__}, not {type(spec).__name__}")
        self.spec = spec
        self.dtype = torch_dtype(spec.dtype)

    def load(self, weights) -> None:
        self.weights = weights


class LinearOracle(_Loaded, LinearImpl):
    spec_type = LinearSpec

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w, b = self.weights.weight.double(), self.weights.bias
        y = x.double() @ w.T
        if b is not None:
            y = y + b.double()
        if self.spec.gated:
            gate, up = y.split(self.spec.out_features, dim=-1)
            y = torch.nn.functional.silu(gate) * up
        return y.to(self.dtype)


class RMSNormOracle(_Loaded, RMSNormImpl):
    spec_type = RMSNormSpec

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None):
        if residual is None:
            s = x.clone()
        elif self.spec.residual_fp32:  # float32 whatever the residual's dtype: one rounding of the exact sum
            s = x.float() + residual.float()
        else:
            s = (x.double() + residual.double()).to(x.dtype)
        sf = s.double()
        normed = sf * torch.rsqrt(sf.pow(2).mean(-1, keepdim=True) + self.spec.eps)
        return (self.weights.weight.double() * normed).to(self.dtype), s


class RotaryOracle(_Loaded, RotaryImpl):
    spec_type = RotarySpec

    def forward(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor):
        return self._rotate(positions, q), self._rotate(positions, k)

    def _rotate(self, positions: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        half = self.spec.dim // 2
        angles = positions.to(torch.float64)[:, None, None] * inv_freq(self.spec)  # [T, 1, half]
        cos, sin = angles.cos(), angles.sin()
        out = x.double().clone()
        x1, x2 = out[..., :half].clone(), out[..., half:2 * half].clone()
        out[..., :half] = x1 * cos - x2 * sin
        out[..., half:2 * half] = x2 * cos + x1 * sin
        return out.to(x.dtype)


class EmbeddingOracle(_Loaded, EmbeddingImpl):
    spec_type = EmbeddingSpec

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.weights.weight[ids.long()].clone().to(self.dtype)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return (hidden.double() @ self.weights.weight.double().T).to(self.dtype)


class ArgmaxOracle(_Loaded, ArgmaxImpl):
    spec_type = ArgmaxSpec

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        out = []
        for row in logits.tolist():
            nans = [i for i, v in enumerate(row) if v != v]
            out.append(nans[0] if nans else max(range(len(row)), key=lambda i: (row[i], -i)))
        return torch.tensor(out, dtype=torch.int64, device=logits.device)


class MoEOracle(_Loaded, MoEImpl):
    """One token at a time: its router logits (or the caller's), its experts chosen in Python, their
    products summed."""

    spec_type = MoESpec

    def forward(self, x: torch.Tensor, logits: torch.Tensor | None = None) -> torch.Tensor:
        given = [None] * x.shape[0] if logits is None else logits.double()
        return torch.stack([self._token(row, g) for row, g in zip(x.double(), given)]).to(self.dtype)

    def _token(self, x: torch.Tensor, given: torch.Tensor | None) -> torch.Tensor:
        spec, w = self.spec, self.weights
        if spec.logits_input:
            logits = given
        else:
            logits = w.router.double() @ x
            if w.router_bias is not None:
                logits = logits + w.router_bias.double()
        scores = {"softmax_topk": logits.softmax(-1), "topk_softmax": logits, "sigmoid_topk": logits.sigmoid()}[
            spec.gating]
        choice = scores if w.selection_bias is None else scores + w.selection_bias.double()
        values = choice.tolist()
        # the largest first; of equal values the lower expert index first
        chosen = sorted(range(spec.num_experts), key=lambda e: (-values[e], e))[:spec.top_k]
        weights = logits[chosen].softmax(-1) if spec.gating == "topk_softmax" else scores[chosen]
        if spec.normalize_topk:
            weights = weights / weights.sum()
        weights = weights * spec.routed_scaling
        y = torch.zeros_like(x)
        for e, weight in zip(chosen, weights):
            y += weight * self._expert(e, x)
        return y

    def _expert(self, e: int, x: torch.Tensor) -> torch.Tensor:
        h = self.weights.gate_up[e].double() @ x
        if self.spec.gated:
            gate, up = h.split(self.spec.intermediate_size)
            h = torch.nn.functional.silu(gate) * up
        else:
            h = torch.relu(h).square()
        return self.weights.down[e].double() @ h


OP_ORACLES = {"linear": LinearOracle, "rms_norm": RMSNormOracle, "rotary": RotaryOracle,
              "embedding": EmbeddingOracle, "argmax": ArgmaxOracle, "moe": MoEOracle}
