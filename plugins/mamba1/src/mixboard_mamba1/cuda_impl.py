"""mamba1_cuda: Mamba1 on the fused kernels of causal-conv1d and mamba-ssm.

* decodes, all in one call each: ``causal_conv1d_update`` on the conv pool
  with ``conv_state_indices`` (causal-conv1d >= 1.5) and
  ``selective_state_update`` on the SSM pool with ``state_batch_indices``
  (mamba-ssm >= 2.3); both update the pools in place.
* prefills, one sequence at a time (the libraries have no varlen entry point
  that takes initial states): ``causal_conv1d_fn`` with ``initial_states``
  and ``return_final_states`` (channel-last layout, which it requires for
  both), then ``selective_scan_fn`` with ``return_last_state``. That kernel
  always starts from zeros, so a sequence continuing from its saved state
  runs it without the gate and adds the saved state's response
  (initial_state.py) before gating.

Layouts the kernels take: conv state [slots, d_inner, d_conv - 1] (the
canonical one), SSM state [slots, d_inner, d_state]; the conv state in the
activations' dtype (Mamba1Cuda.check refuses a spec that keeps it in another).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mixboard.kinds.mamba1 import Mamba1Impl, Mamba1Spec
from mixboard.ops.slot_step import Prefill, SlotStep

from .initial_state import initial_state_response
from .inputs import InputChecks


class Mamba1CudaImpl(Mamba1Impl):
    def __init__(self, spec: Mamba1Spec):
        from causal_conv1d import causal_conv1d_fn, causal_conv1d_update
        from mamba_ssm.ops.selective_scan_interface import selective_scan_fn
        from mamba_ssm.ops.triton.selective_state_update import selective_state_update

        self.spec = spec
        self.check = InputChecks(spec)
        self.conv_fn, self.conv_update = causal_conv1d_fn, causal_conv1d_update
        self.scan_fn, self.state_update = selective_scan_fn, selective_state_update

    def forward(self, x, z, weights, state, meta):
        spec, layer = self.spec, self.layer_name
        meta = SlotStep.of(layer, meta, spec.d_conv)
        self.check(layer, x, z, weights, state, meta)
        w = _KernelWeights(weights, x.dtype)
        out = torch.empty_like(x)
        nd = meta.num_decodes
        if nd:
            out[:nd] = self._decode(x[:nd], z[:nd], w, state, meta.decode_slots_i32)
        for p in meta.prefills:
            out[p.start:p.end] = self._prefill(x[p.start:p.end], z[p.start:p.end], w, state, p)
        return out

    def _project(self, xc, w):
        """x_proj, then dt_proj without its bias (the kernels add it and apply softplus)."""
        R, N = self.spec.dt_rank, self.spec.d_state
        x_dbl = F.linear(xc, w.x_proj)
        return F.linear(x_dbl[:, :R], w.dt_proj), x_dbl[:, R:R + N], x_dbl[:, R + N:]

    def _decode(self, x, z, w, state, slots):
        xc = self.conv_update(x, state["conv"], w.conv, w.conv_bias, activation="silu", conv_state_indices=slots)
        dt, B, C = self._project(xc, w)
        return self.state_update(state["ssm"], xc, dt, w.A, B, C, D=w.D, z=z, dt_bias=w.dt_bias, dt_softplus=True,
                                 state_batch_indices=slots)

    def _prefill(self, x, z, w, state, p: Prefill):
        conv_pool, ssm_pool = state["conv"], state["ssm"]
        # Channel-last [1, D, L] views: the layout causal_conv1d_fn needs for initial and final states.
        initial = None if p.fresh else conv_pool[p.slot].t().contiguous().unsqueeze(0).transpose(1, 2)
        xc, final = self.conv_fn(x.unsqueeze(0).transpose(1, 2), w.conv, w.conv_bias, initial_states=initial,
                                 return_final_states=True, activation="silu")
        conv_pool[p.slot] = final[0]
        xc = xc[0].t()  # [L, D]
        dt, B, C = self._project(xc, w)

        def bdl(t):  # [L, F] -> [1, F, L], last dim contiguous as selective_scan_fn wants
            return t.t().contiguous().unsqueeze(0)

        if p.fresh:
            y, last = self.scan_fn(bdl(xc), bdl(dt), w.A, bdl(B), bdl(C), D=w.D, z=bdl(z), delta_bias=w.dt_bias,
                                   delta_softplus=True, return_last_state=True)
            ssm_pool[p.slot] = last[0]
            return y[0].t()
        y, last = self.scan_fn(bdl(xc), bdl(dt), w.A, bdl(B), bdl(C), D=w.D, z=None, delta_bias=w.dt_bias,
                               delta_softplus=True, return_last_state=True)
        h0 = ssm_pool[p.slot].float()
        added, decay = initial_state_response(F.softplus(dt.float() + w.dt_bias), w.A, C.float(), h0)
        ssm_pool[p.slot] = last[0].float() + decay * h0
        return ((y[0].t().float() + added) * F.silu(z.float())).to(x.dtype)


class _KernelWeights:
    """The layer's weights in the dtypes the kernels check for: A, D and dt_bias
    float32; the projections in the activations' dtype; conv bias as the conv weight."""

    def __init__(self, weights, dtype: torch.dtype):
        self.conv = weights.conv_weight
        self.conv_bias = None if weights.conv_bias is None else weights.conv_bias.to(self.conv.dtype)
        self.x_proj = weights.x_proj_weight.to(dtype)
        self.dt_proj = weights.dt_proj_weight.to(dtype)
        self.dt_bias = weights.dt_proj_bias.float()
        self.A = weights.A.float()
        self.D = weights.D.float()
