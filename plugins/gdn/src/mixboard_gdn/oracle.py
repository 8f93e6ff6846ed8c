"""The definition of ``gated_delta_net``: the recurrence token by token in float64.

Written from the recurrence in ``kind.py`` alone (not from fla's kernels nor transformers' code), and
slow on purpose: the kit compares every backend with it on small shapes.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch
from mixboard import CommonBatchMetadata

from .kind import GatedDeltaNetImpl, GatedDeltaNetSpec, GatedDeltaNetWeights

F64 = torch.float64


def _need(name: str, tensor: Any, shape: tuple[int, ...]) -> None:
    if not isinstance(tensor, torch.Tensor) or tuple(tensor.shape) != shape:
        got = list(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
        raise ValueError(f"gated_delta_net: {name} must have shape {list(shape)}, not {got}")


def _softplus(x: torch.Tensor) -> torch.Tensor:
    return x.clamp(min=0) + torch.log1p(torch.exp(-x.abs()))  # log(1 + exp(x)), no linear cut-off


def _silu(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(x)


class GatedDeltaNetOracle(GatedDeltaNetImpl):
    def __init__(self, spec: GatedDeltaNetSpec):
        if not isinstance(spec, GatedDeltaNetSpec):
            raise ValueError(f"GatedDeltaNetOracle needs a GatedDeltaNetSpec, not {type(spec).__name__}")
        self.spec = spec

    def forward(self, qkv, z, b, a, weights: GatedDeltaNetWeights, state: Mapping[str, torch.Tensor], meta: Any):
        spec = self.spec
        Hk, Hv, Dk, Dv, W, CD = (spec.num_k_heads, spec.num_v_heads, spec.head_k_dim, spec.head_v_dim,
                                 spec.d_conv, spec.conv_dim)
        if not isinstance(meta, CommonBatchMetadata):
            raise ValueError(f"the oracle takes the step's CommonBatchMetadata as meta, not {type(meta).__name__}")
        T = meta.num_tokens
        for name, tensor, shape in (("qkv", qkv, (T, CD)), ("z", z, (T, Hv * Dv)), ("b", b, (T, Hv)),
                                    ("a", a, (T, Hv)), ("conv_weight", weights.conv_weight, (CD, W)),
                                    ("dt_bias", weights.dt_bias, (Hv,)), ("A", weights.A, (Hv,)),
                                    ("conv state", state.get("conv"), (state["conv"].shape[0], CD, W - 1)),
                                    ("ssm state", state.get("ssm"), (state["ssm"].shape[0], Hv, Dk, Dv))):
            _need(name, tensor, shape)
        if spec.conv_bias:
            _need("conv_bias", weights.conv_bias, (CD,))
        if spec.gated_norm:
            _need("norm_weight", weights.norm_weight, (Dv,))
        conv_pool, ssm_pool = state["conv"], state["ssm"]
        conv_w = weights.conv_weight.to(F64)
        conv_b = weights.conv_bias.to(F64) if spec.conv_bias else torch.zeros(CD, dtype=F64)
        A, dt_bias = weights.A.to(F64), weights.dt_bias.to(F64)
        norm_weight = weights.norm_weight.to(F64) if spec.gated_norm else None
        per_k = Hv // Hk
        out = torch.empty((T, Hv, Dv), dtype=F64)
        starts = meta.query_start_loc_cpu.tolist()
        slots, contexts = meta.state_slots_cpu.tolist(), meta.context_lens_cpu.tolist()
        for i, (slot, context) in enumerate(zip(slots, contexts)):
            fresh = context == 0  # a fresh sequence starts from zeros, whatever its records hold
            history = torch.zeros((CD, W - 1), dtype=F64) if fresh else conv_pool[slot].to(F64).clone()
            S = torch.zeros((Hv, Dk, Dv), dtype=F64) if fresh else ssm_pool[slot].to(F64).clone()
            for t in range(starts[i], starts[i + 1]):
                history = torch.cat([history, qkv[t].to(F64)[:, None]], dim=1)  # oldest first, newest last
                x = _silu((conv_w * history).sum(dim=1) + conv_b)
                history = history[:, 1:]
                q = x[:Hk * Dk].reshape(Hk, Dk)
                k = x[Hk * Dk:2 * Hk * Dk].reshape(Hk, Dk)
                v = x[2 * Hk * Dk:].reshape(Hv, Dv)
                if spec.qk_l2norm:
                    q = q / torch.sqrt((q * q).sum(dim=1, keepdim=True) + 1e-6)
                    k = k / torch.sqrt((k * k).sum(dim=1, keepdim=True) + 1e-6)
                q = q / Dk ** 0.5
                beta = torch.sigmoid(b[t].to(F64))
                g = A * _softplus(a[t].to(F64) + dt_bias)
                for h in range(Hv):
                    j = h // per_k
                    S[h] = torch.exp(g[h]) * S[h]
                    S[h] = S[h] + torch.outer(k[j], beta[h] * (v[h] - S[h].T @ k[j]))
                    o = S[h].T @ q[j]
                    if spec.gated_norm:
                        o = o / torch.sqrt((o * o).mean() + spec.norm_eps) * norm_weight
                        o = o * _silu(z[t, h * Dv:(h + 1) * Dv].to(F64))
                    out[t, h] = o
            conv_pool[slot] = history.to(conv_pool.dtype)
            ssm_pool[slot] = S.to(ssm_pool.dtype)
        return out.reshape(T, Hv * Dv).to(qkv.dtype)
