"""The ``short_conv_triton`` impl: y = C * conv(B * x), the gates applied inside the kernel."""

from __future__ import annotations

from typing import Mapping

import torch

from mixboard.kinds.short_conv import ShortConvImpl, ShortConvSpec, ShortConvWeights
from mixboard.ops.slot_step import SlotStep

from ._conv import conv_ragged, conv_step
from .inputs import check_short_conv, rows_contiguous


class ShortConvTritonImpl(ShortConvImpl):
    def __init__(self, spec: ShortConvSpec):
        self.spec = spec

    def forward(self, B: torch.Tensor, C: torch.Tensor, x: torch.Tensor, weights: ShortConvWeights,
                state: Mapping[str, torch.Tensor], meta: SlotStep) -> torch.Tensor:
        step = SlotStep.of(self.layer_name, meta, self.spec.conv_width)
        pool = check_short_conv(self.layer_name, self.spec, B, C, x, weights, state, step)
        weight, bias = rows_contiguous(weights.conv_weight), weights.conv_bias
        if step.all_decodes:
            return conv_step(x, weight, bias, pool, step.decode_slots_i32, B=B, C=C)
        common = step.common
        return conv_ragged(x, weight, bias, pool, common.query_start_loc, common.context_lens, common.state_slots,
                           common.max_query_len, B=B, C=C)
