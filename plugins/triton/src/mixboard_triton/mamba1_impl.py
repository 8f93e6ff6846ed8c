"""The ``mamba1_triton`` impl: conv kernel, the two projections in torch, scan kernel.

    xc = silu(conv(x))                               _conv.conv_ragged / conv_step
    dt, B, C = split(xc @ x_proj_weight.T)           torch (a matmul is what every GPU library does best)
    dt = dt @ dt_proj_weight.T                       torch; bias and softplus inside the scan
    y = scan(xc, dt, B, C, z)                        _scan.scan / state_update
"""

from __future__ import annotations

from typing import Mapping

import torch

from mixboard.kinds.mamba1 import Mamba1Impl, Mamba1Spec, Mamba1Weights
from mixboard.ops.slot_step import SlotStep

from ._conv import conv_ragged, conv_step
from ._scan import scan, state_update
from .inputs import check_mamba1, rows_contiguous


class Mamba1TritonImpl(Mamba1Impl):
    def __init__(self, spec: Mamba1Spec):
        self.spec = spec

    def forward(self, x: torch.Tensor, z: torch.Tensor, weights: Mamba1Weights, state: Mapping[str, torch.Tensor],
                meta: SlotStep) -> torch.Tensor:
        spec = self.spec
        step = SlotStep.of(self.layer_name, meta, spec.d_conv)
        conv_pool, ssm_pool = check_mamba1(self.layer_name, spec, x, z, weights, state, step)
        conv_weight, A = rows_contiguous(weights.conv_weight), rows_contiguous(weights.A)
        common = step.common
        if step.all_decodes:
            xc = conv_step(x, conv_weight, weights.conv_bias, conv_pool, step.decode_slots_i32, silu=True)
        else:
            xc = conv_ragged(x, conv_weight, weights.conv_bias, conv_pool, common.query_start_loc,
                             common.context_lens, common.state_slots, common.max_query_len, silu=True)
        R, N = spec.dt_rank, spec.d_state
        dbc = xc @ weights.x_proj_weight.t()  # [T, R + 2N]
        dt = dbc[:, :R] @ weights.dt_proj_weight.t()
        B, C = dbc[:, R:R + N], dbc[:, R + N:]
        if step.all_decodes:
            return state_update(xc, dt, B, C, z, A, weights.D, weights.dt_proj_bias, ssm_pool, step.decode_slots_i32)
        return scan(xc, dt, B, C, z, A, weights.D, weights.dt_proj_bias, ssm_pool, common.query_start_loc,
                    common.context_lens, common.state_slots)
