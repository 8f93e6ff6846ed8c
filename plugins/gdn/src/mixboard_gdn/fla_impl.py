"""The ``gdn_fla`` impl: the delta-rule scan on fla-core's Triton kernels.

The conv is mixboard's ragged causal conv (shared with gdn_torch): it reads and writes the kind's conv state
in its slots, which fla's ShortConvolution (its own cache layout, per batch row) does not, and it is
memory-bound next to the scan. Decodes are one ``fused_recurrent_gated_delta_rule`` call (one sequence per
row, their records gathered and written back); prefills are one varlen ``chunk_gated_delta_rule`` call over
all of them (``cu_seqlens``), each from its record or zeros. fla's recurrent state is [N, Hv, Dk, Dv], the
kind's own layout: no transpose. q/k L2 normalisation (eps 1e-6, as the kind's) runs inside the kernels;
value heads share query/key heads (GVA) inside them too. Gates and betas are computed here in float32; the
scan runs in float32; the gated norm is gdn_torch's.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch
import torch.nn.functional as F
from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule
from mixboard.ops.slot_step import SlotStep

from .kind import GatedDeltaNetWeights
from .torch_impl import GdnTorchImpl


class GdnFlaImpl(GdnTorchImpl):
    def forward(self, qkv: torch.Tensor, z: torch.Tensor, b: torch.Tensor, a: torch.Tensor,
                weights: GatedDeltaNetWeights, state: Mapping[str, torch.Tensor], meta: Any) -> torch.Tensor:
        spec = self.spec
        step = SlotStep.of(self.layer_name, meta, spec.d_conv)
        conv_pool, ssm_pool = self.check(self.layer_name, qkv, z, b, a, weights, state, step)
        Hk, Hv, Dk, Dv = spec.num_k_heads, spec.num_v_heads, spec.head_k_dim, spec.head_v_dim
        x = self._conv(step, qkv, weights, conv_pool)
        T, key_dim = x.shape[0], spec.key_dim
        # fla's kernels address rows as packed [T, H, D]: contiguous copies of the conv output's column ranges
        q = x[:, :key_dim].reshape(T, Hk, Dk).contiguous()
        k = x[:, key_dim:2 * key_dim].reshape(T, Hk, Dk).contiguous()
        v = x[:, 2 * key_dim:].reshape(T, Hv, Dv).contiguous()
        beta = torch.sigmoid(b.float())
        g = weights.A.float() * F.softplus(a.float() + weights.dt_bias.float())  # [T, Hv], log-space decay <= 0
        o = torch.empty(v.shape, dtype=torch.float32, device=v.device)  # [T, Hv, Dv]
        kernel_args = dict(scale=Dk ** -0.5, output_final_state=True, use_qk_l2norm_in_kernel=spec.qk_l2norm)
        nd = step.num_decodes
        if nd:  # one token per sequence: a batch of nd sequences of length 1
            slots = step.decode_slots
            out, S = fused_recurrent_gated_delta_rule(
                q[:nd, None], k[:nd, None], v[:nd, None], g[:nd, None], beta=beta[:nd, None],
                initial_state=ssm_pool[slots].float(), **kernel_args)
            o[:nd] = out[:, 0]
            ssm_pool[slots] = S.to(ssm_pool.dtype)
        if step.prefills:
            self._prefills(step, q, k, v, g, beta, o, ssm_pool, kernel_args)
        return self._output(o, z, weights, qkv.dtype).view(T, spec.value_dim)

    @staticmethod
    def _prefills(step: SlotStep, q, k, v, g, beta, o, ssm_pool, kernel_args) -> None:
        """Every prefill in one varlen call: its rows packed (they follow the decodes), cu_seqlens their
        bounds, its initial state its record or zeros."""
        prefills = step.prefills
        first, last = prefills[0].start, prefills[-1].end
        bounds = [p.start - first for p in prefills] + [last - first]
        cu_seqlens = torch.tensor(bounds, dtype=torch.long, device=q.device)
        slots = torch.tensor([p.slot for p in prefills], dtype=torch.long, device=q.device)
        h0 = ssm_pool[slots].float()
        fresh = [i for i, p in enumerate(prefills) if p.fresh]
        if fresh:
            h0[fresh] = 0.0
        rows = slice(first, last)
        out, S = chunk_gated_delta_rule(q[None, rows], k[None, rows], v[None, rows], g[None, rows],
                                        beta[None, rows], initial_state=h0, cu_seqlens=cu_seqlens, **kernel_args)
        o[rows] = out[0]
        ssm_pool[slots] = S.to(ssm_pool.dtype)
