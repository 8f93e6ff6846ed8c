"""mamba1_torch: Mamba1 in portable PyTorch, on any device.

A step runs in float32 whatever the layer's dtype (as the CUDA kernels do)
and casts y back at the end:

* conv: mixboard.ops.causal_conv over the whole ragged batch; a batch of
  decodes only takes ``causal_conv1d_step`` (one window per sequence, no conv over a
  sequence);
* x_proj, dt_proj and softplus for all tokens at once;
* decodes: one fused state update for all of them (``ssm_step``);
* prefills: the chunked scan of ``scan.py``, one sequence at a time, from
  the slot's state (zeros for a fresh sequence); the final state goes back.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mixboard.kinds.mamba1 import Mamba1Impl, Mamba1Spec
from mixboard.ops.causal_conv import causal_conv1d, causal_conv1d_step
from mixboard.ops.slot_step import SlotStep
from mixboard.ops.slots import SlotRecords

from .inputs import InputChecks, as_float
from .scan import LOG2E, ScanWorkspace, selective_scan


class Mamba1TorchImpl(Mamba1Impl):
    def __init__(self, spec: Mamba1Spec):
        self.spec = spec
        self.check = InputChecks(spec)

    def forward(self, x, z, weights, state, meta):
        spec, layer = self.spec, self.layer_name
        meta = SlotStep.of(layer, meta, spec.d_conv)
        self.check(layer, x, z, weights, state, meta)
        conv_pool, ssm_pool = state["conv"], state["ssm"]
        x32 = x.float()
        conv_w, conv_b = weights.conv_weight.float(), as_float(weights.conv_bias)
        if meta.all_decodes:
            xc = causal_conv1d_step(x32, conv_w, conv_b, conv_pool, meta.decode_slots, activation="silu",
                                    slot_range=meta.decode_range)
        else:
            xc = causal_conv1d(x32, conv_w, conv_b, conv_pool, meta.conv_index, activation="silu")
        dt, B, C = project(xc, weights, spec)
        A, D = weights.A.float(), weights.D.float()
        nd = meta.num_decodes
        if nd:
            y_dec = ssm_step(ssm_pool, meta, xc[:nd], dt[:nd], A, B[:nd], C[:nd])
            y_dec = y_dec.addcmul_(xc[:nd], D).mul_(F.silu(z[:nd].float()))
            if meta.all_decodes and y_dec.dtype == x.dtype:  # the whole output: no copy into a fresh one
                return y_dec
        y = torch.empty_like(x)
        if nd:
            y[:nd] = y_dec
        workspace = ScanWorkspace()
        for p in meta.prefills:
            h0 = torch.zeros_like(A) if p.fresh else ssm_pool[p.slot].float()
            rows = slice(p.start, p.end)
            ssm_pool[p.slot] = selective_scan(xc[rows], dt[rows], A, B[rows], C[rows], h0, out=y[rows], skip=D,
                                              z=z[rows], workspace=workspace)
        return y


def project(xc: torch.Tensor, weights, spec: Mamba1Spec):
    """dt = softplus(dt_proj(x_proj(x)[:dt_rank]) + bias), B, C: the input-dependent parameters
    (dt, B and C RMS-normalized first with the spec's dt_bc_norms)."""
    R, N = spec.dt_rank, spec.d_state
    x_dbl = xc @ weights.x_proj_weight.float().t()
    dt_low, B, C = x_dbl[:, :R], x_dbl[:, R:R + N], x_dbl[:, R + N:]
    if spec.dt_bc_norms:
        eps = spec.norm_eps
        dt_low = F.rms_norm(dt_low, (R,), weights.dt_norm_weight.float(), eps)
        B = F.rms_norm(B, (N,), weights.b_norm_weight.float(), eps)
        C = F.rms_norm(C, (N,), weights.c_norm_weight.float(), eps)
    dt = F.softplus(F.linear(dt_low, weights.dt_proj_weight.float(), weights.dt_proj_bias.float()))
    return dt, B, C


def ssm_step(pool: torch.Tensor, meta: SlotStep, u, dt, A, B, C) -> torch.Tensor:
    """One token for each decode: h = exp(dt A) h + dt u B, y = C . h. Returns y [n, D]."""
    saved = SlotRecords(pool, meta.decode_slots, meta.decode_range)
    h = saved.records if saved.records.dtype == torch.float32 else saved.records.float()  # [n, D, N]
    decay = torch.mul(dt.unsqueeze(-1), A * LOG2E).exp2_()  # exp(dt A), by the cheaper exp2 kernel
    h.mul_(decay).addcmul_((dt * u).unsqueeze(-1), B.unsqueeze(1))
    saved.store(h)
    # [1, N] @ [N, D] per sequence: the transposed view keeps D the long axis of the product.
    return torch.bmm(C.unsqueeze(1), h.transpose(1, 2)).squeeze(1)
