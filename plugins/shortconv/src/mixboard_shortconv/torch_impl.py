"""The portable impl: y = C * causal_conv1d(B * x), conv state in slots."""

from __future__ import annotations

from typing import Mapping

import torch

from mixboard.kinds.short_conv import ShortConvImpl, ShortConvSpec, ShortConvWeights
from mixboard.ops.causal_conv import causal_conv1d

from .inputs import Expected, check_inputs
from .meta import ShortConvMeta


class ShortConvTorchImpl(ShortConvImpl):
    def __init__(self, spec: ShortConvSpec):
        self.spec = spec
        self.want = Expected(spec)

    def forward(self, B: torch.Tensor, C: torch.Tensor, x: torch.Tensor, weights: ShortConvWeights,
                state: Mapping[str, torch.Tensor], meta: ShortConvMeta) -> torch.Tensor:
        pool = check_inputs(self.layer_name, self.want, B, C, x, weights, state, meta)
        bx = B * x  # the conv input, and what the state keeps (as in Lfm2ShortConv)
        if meta.all_decode:
            conv = decode_step(bx, weights.conv_weight, weights.conv_bias, pool, meta.slots)
        else:
            conv = causal_conv1d(bx, weights.conv_weight, weights.conv_bias, pool, meta.conv_index)
        return conv.mul_(C)  # conv is a fresh tensor on both paths: gate it in place


def decode_step(bx: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, pool: torch.Tensor,
                slots: torch.Tensor) -> torch.Tensor:
    """One token per sequence, from the saved W - 1 inputs: no recomputation,
    one gather and one scatter for the whole batch. Whole [N, D] multiply-adds
    rather than ops over the tiny last axis, which are several times slower."""
    state = pool.index_select(0, slots)  # [N, D, W-1], oldest first
    keep = state.shape[-1]
    out = bx * weight[:, keep]
    for k in range(keep):
        out.addcmul_(state[:, :, k].to(bx.dtype), weight[:, k])
    if bias is not None:
        out += bias
    shifted = torch.empty_like(state)  # drop the oldest input, append the new one
    shifted[:, :, :-1] = state[:, :, 1:]
    shifted[:, :, -1] = bx
    pool.index_copy_(0, slots, shifted)
    return out
