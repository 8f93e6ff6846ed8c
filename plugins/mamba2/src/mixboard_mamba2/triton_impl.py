"""The ``mamba2_triton`` impl: mamba-ssm's Triton kernels around mixboard's conv.

* conv: mixboard's portable ragged causal conv (one depthwise ``conv1d`` for
  the whole step). causal-conv1d is not needed: its varlen kernels want a
  conv state of width d_conv where the canonical layout keeps d_conv - 1,
  and the conv is a small part of the layer's cost. Half-precision inputs
  are summed in float32 (``mamba2_torch``'s ``conv_silu``), as causal-conv1d
  sums them, and rounded once for the kernels.
* decodes: ``selective_state_update`` on the SSM pool in place
  (``state_batch_indices`` = the slots), with A, dt, dt_bias and D tied per
  head by stride-0 broadcasting, as mamba-ssm's own Mamba2.step does.
* prefills: ``mamba_chunk_scan_combined``, fresh ones packed in one varlen
  call, a continuing one alone with its saved state (see ``triton_meta``).
* gated norm: ``rmsnorm_fn(y, z=z, norm_before_gate=False, group_size=...)``;
  with ``gated_norm=False`` none: the kernels' y (D skip included, z=None)
  is returned.

The kernel modules are imported when the impl is built, never at plugin import.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import torch
from mixboard.kinds.mamba2 import Mamba2Impl, Mamba2Spec, Mamba2Weights

from .inputs import InputChecks
from .ssd import discretize
from .torch_impl import conv_silu
from .triton_meta import as_meta


class Mamba2TritonImpl(Mamba2Impl):
    def __init__(self, spec: Mamba2Spec):
        from mamba_ssm.ops.triton.layernorm_gated import rmsnorm_fn
        from mamba_ssm.ops.triton.selective_state_update import selective_state_update
        from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined

        self.spec = spec
        self.check = InputChecks(spec)
        self._scan, self._update, self._norm = mamba_chunk_scan_combined, selective_state_update, rmsnorm_fn
        self.dt_limit = (spec.dt_min, spec.dt_max)
        # selective_state_update has no dt limit: with one, dt is discretized here first.
        self.limited = self.dt_limit != (0.0, math.inf)

    def forward(self, z: torch.Tensor, xBC: torch.Tensor, dt: torch.Tensor, weights: Mamba2Weights,
                state: Mapping[str, torch.Tensor], meta: Any) -> torch.Tensor:
        spec = self.spec
        step = as_meta(self.layer_name, meta, spec)
        conv_pool, ssm_pool = self.check(self.layer_name, z, xBC, dt, weights, state, step.base)
        T, H, P, G, N = step.base.num_tokens, spec.num_heads, spec.head_dim, spec.n_groups, spec.d_state
        DI = spec.d_inner

        # summed in float32 as mamba2_torch sums it, rounded once to the dtype the Triton kernels are given
        xbc = conv_silu(step.base, xBC, weights, conv_pool).to(xBC.dtype)
        x = xbc[:, :DI].view(T, H, P)
        B = xbc[:, DI:DI + G * N].view(T, G, N)
        C = xbc[:, DI + G * N:].view(T, G, N)
        A = weights.A.float()

        y = torch.empty(T, H, P, dtype=xBC.dtype, device=xBC.device)
        nd = step.base.num_decodes
        if nd:
            y[:nd] = self._decode(ssm_pool, step.base.decode_slots_i32, x[:nd], dt[:nd], A, B[:nd], C[:nd], weights)
        for call in step.scans:
            s = slice(call.start, call.end)
            initial = None if call.initial_slot is None else ssm_pool[call.initial_slot].unsqueeze(0)
            args = (x[s].unsqueeze(0), dt[s].unsqueeze(0), A, B[s].unsqueeze(0), C[s].unsqueeze(0), spec.chunk_size)
            kwargs = dict(D=weights.D, z=None, dt_bias=weights.dt_bias, initial_states=initial, seq_idx=call.seq_idx,
                          dt_softplus=True, dt_limit=self.dt_limit)
            if call.cu_seqlens is not None:
                out, finals = self._scan(*args, cu_seqlens=call.cu_seqlens, return_varlen_states=True, **kwargs)
            else:
                out, finals = self._scan(*args, return_final_states=True, **kwargs)
            y[s] = out[0]
            ssm_pool.index_copy_(0, call.slots, finals.to(ssm_pool.dtype))
        if not spec.gated_norm:  # y = S @ C + D * x: both kernels add the D skip, and gate nothing (z=None)
            return y.view(T, DI)
        return self._norm(y.view(T, DI), weights.norm_weight, None, z=z, eps=spec.norm_eps, group_size=DI // G,
                          norm_before_gate=False)

    def _decode(self, ssm_pool, indices, x, dt, A, B, C, weights: Mamba2Weights) -> torch.Tensor:
        n, H, P = x.shape
        N = B.shape[-1]
        dt_bias, softplus = weights.dt_bias, True
        if self.limited:
            dt = discretize(dt, dt_bias, *self.dt_limit)  # float32; the kernel reads any float dtype
            dt_bias, softplus = torch.zeros_like(dt_bias), False
        return self._update(
            ssm_pool, x, dt.unsqueeze(-1).expand(n, H, P), A.view(H, 1, 1).expand(H, P, N), B, C,
            D=weights.D.view(H, 1).expand(H, P), z=None, dt_bias=dt_bias.view(H, 1).expand(H, P),
            dt_softplus=softplus, state_batch_indices=indices,
        )
