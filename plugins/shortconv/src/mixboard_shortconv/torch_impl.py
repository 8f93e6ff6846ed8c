"""The portable impl: y = C * causal_conv1d(B * x), conv state in slots."""

from __future__ import annotations

from typing import Mapping

import torch

from mixboard.kinds.short_conv import ShortConvImpl, ShortConvSpec, ShortConvWeights
from mixboard.ops.causal_conv import causal_conv1d, causal_conv1d_step
from mixboard.ops.slot_step import SlotStep

from .inputs import Expected, check_inputs


class ShortConvTorchImpl(ShortConvImpl):
    def __init__(self, spec: ShortConvSpec):
        self.spec = spec
        self.want = Expected(spec)

    def forward(self, B: torch.Tensor, C: torch.Tensor, x: torch.Tensor, weights: ShortConvWeights,
                state: Mapping[str, torch.Tensor], meta: SlotStep) -> torch.Tensor:
        meta = SlotStep.of(self.layer_name, meta, self.spec.conv_width)
        pool = check_inputs(self.layer_name, self.want, B, C, x, weights, state, meta)
        bx = B * x  # the conv input, and what the state keeps (as in Lfm2ShortConv)
        if meta.all_decodes:
            conv = causal_conv1d_step(bx, weights.conv_weight, weights.conv_bias, pool, meta.decode_slots,
                                      slot_range=meta.decode_range)
        else:
            conv = causal_conv1d(bx, weights.conv_weight, weights.conv_bias, pool, meta.conv_index)
        return conv.mul_(C)  # conv is a fresh tensor on both paths: gate it in place
