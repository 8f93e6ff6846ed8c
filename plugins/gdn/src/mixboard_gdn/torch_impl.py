"""The ``gdn_torch`` impl: Gated DeltaNet in plain PyTorch.

The conv is mixboard's shared ragged causal conv; decodes are one batched step of the delta rule on their
slots' records; each prefill is a chunked scan (``delta_rule.py``) from its saved state or zeros; then the
per-head gated RMSNorm. The scan runs in float32 whatever the layer's dtype.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch
import torch.nn.functional as F
from mixboard.ops.causal_conv import causal_conv1d, causal_conv1d_step
from mixboard.ops.slot_step import SlotStep
from mixboard.ops.slots import SlotRecords

from .delta_rule import chunked_delta_rule, delta_rule_step
from .inputs import InputChecks
from .kind import GatedDeltaNetImpl, GatedDeltaNetSpec, GatedDeltaNetWeights


class GdnTorchImpl(GatedDeltaNetImpl):
    def __init__(self, spec: GatedDeltaNetSpec):
        self.spec = spec
        self.check = InputChecks(spec)

    def forward(self, qkv: torch.Tensor, z: torch.Tensor, b: torch.Tensor, a: torch.Tensor,
                weights: GatedDeltaNetWeights, state: Mapping[str, torch.Tensor], meta: Any) -> torch.Tensor:
        spec = self.spec
        step = SlotStep.of(self.layer_name, meta, spec.d_conv)
        conv_pool, ssm_pool = self.check(self.layer_name, qkv, z, b, a, weights, state, step)
        q, k, v = self._qkv(step, qkv, weights, conv_pool)
        beta = torch.sigmoid(b.float())
        g = weights.A.float() * F.softplus(a.float() + weights.dt_bias.float())  # [T, Hv], <= 0
        nd, T = step.num_decodes, step.num_tokens
        o = torch.empty(v.shape, dtype=torch.float32, device=v.device)  # [T, Hv, Dv]
        if nd:
            records = SlotRecords(ssm_pool, step.decode_slots, step.decode_range)
            S = records.records.float()  # the pool itself where its records are float32 and consecutive
            o[:nd] = delta_rule_step(q[:nd], k[:nd], v[:nd], g[:nd], beta[:nd], S)
            records.store(S)
        for p in step.prefills:
            S = (torch.zeros(ssm_pool.shape[1:], dtype=torch.float32, device=v.device) if p.fresh
                 else ssm_pool[p.slot].float())
            rows = slice(p.start, p.end)
            out, S = chunked_delta_rule(q[rows].transpose(0, 1), k[rows].transpose(0, 1), v[rows].transpose(0, 1),
                                        g[rows].T, beta[rows].T, S, spec.chunk_size)
            o[rows] = out.transpose(0, 1)
            ssm_pool[p.slot] = S.to(ssm_pool.dtype)
        return self._output(o, z, weights, qkv.dtype).view(T, spec.value_dim)

    def _qkv(self, step: SlotStep, qkv: torch.Tensor, weights: GatedDeltaNetWeights, conv_pool: torch.Tensor):
        """silu(conv) of every token (conv states read and written in their slots), split into q, k per value
        head ([T, Hv, Dk], q scaled, both L2-normalised with qk_l2norm) and v [T, Hv, Dv], float32."""
        spec = self.spec
        Hk, Hv, Dk, Dv = spec.num_k_heads, spec.num_v_heads, spec.head_k_dim, spec.head_v_dim
        x = self._conv(step, qkv, weights, conv_pool)
        T = x.shape[0]
        q = x[:, :Hk * Dk].reshape(T, Hk, Dk)
        k = x[:, Hk * Dk:2 * Hk * Dk].reshape(T, Hk, Dk)
        v = x[:, 2 * Hk * Dk:].reshape(T, Hv, Dv)
        if spec.qk_l2norm:
            q = q * torch.rsqrt((q * q).sum(dim=-1, keepdim=True) + 1e-6)
            k = k * torch.rsqrt((k * k).sum(dim=-1, keepdim=True) + 1e-6)
        q = q * Dk ** -0.5
        if Hv != Hk:  # each query/key head serves Hv / Hk consecutive value heads
            q, k = q.repeat_interleave(Hv // Hk, dim=1), k.repeat_interleave(Hv // Hk, dim=1)
        return q, k, v

    def _conv(self, step: SlotStep, qkv: torch.Tensor, weights: GatedDeltaNetWeights,
              conv_pool: torch.Tensor) -> torch.Tensor:
        """silu(conv) of every token, conv states read and written in their slots: [T, CD], float32."""
        x = qkv.float() if qkv.dtype in (torch.bfloat16, torch.float16) else qkv  # taps summed in float32
        weight = weights.conv_weight.to(x.dtype)
        bias = None if weights.conv_bias is None else weights.conv_bias.to(x.dtype)
        if step.num_decodes == step.num_tokens:  # decodes only: one window per sequence
            x = causal_conv1d_step(x, weight, bias, conv_pool, step.decode_slots, activation="silu",
                                   slot_range=step.decode_range)
        else:
            x = causal_conv1d(x, weight, bias, conv_pool, step.conv_index, activation="silu")
        return x.float()

    def _output(self, o: torch.Tensor, z: torch.Tensor, weights: GatedDeltaNetWeights,
                dtype: torch.dtype) -> torch.Tensor:
        """The per-head RMSNorm and the gate (with gated_norm), in the layer's dtype: [T, Hv, Dv]."""
        spec = self.spec
        if not spec.gated_norm:
            return o.to(dtype)
        o = o * torch.rsqrt(o.pow(2).mean(dim=-1, keepdim=True) + spec.norm_eps) * weights.norm_weight.float()
        return (o * F.silu(z.float().view(o.shape))).to(dtype)
