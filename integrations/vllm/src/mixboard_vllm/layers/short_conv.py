"""vLLM's ShortConv (LFM2) on mixboard's short_conv kind: in_proj -> (B, C, x) -> backend -> out_proj."""

from __future__ import annotations

import torch
from vllm.model_executor.layers.mamba.short_conv import ShortConv

from mixboard.dtypes import dtype_name

from .. import compat, ops
from .base import MixboardLayer


class MixboardShortConv(MixboardLayer, ShortConv):
    mixboard_kind = "short_conv"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        compat.keep_raw_weights(self.conv)
        self._mixboard_init(["speculative decoding"] if self.num_spec else [])

    def _spec(self):
        from mixboard import ShortConvSpec

        # channel-wise: each rank holds conv_dim / tp channels
        return ShortConvSpec(hidden_size=self.conv_dim // compat.tp_size(self._vllm_config), conv_width=self.L_cache,
                             conv_bias=bool(self.bias), dtype=dtype_name(self.model_config.dtype))

    def _mixboard_weights(self):
        if self._weights is None:
            from mixboard import ShortConvWeights

            w = self.conv.weight
            self._weights = ShortConvWeights(conv_weight=w.view(w.size(0), w.size(2)), conv_bias=self.conv.bias)
        return self._weights

    def _kind_inputs(self, p):
        HS = p.shape[-1] // 3
        return p[:, :HS], p[:, HS:2 * HS], p[:, 2 * HS:]  # B, C, x

    def forward(self, hidden_states: torch.Tensor, output: torch.Tensor):
        BCx, _ = self.in_proj(hidden_states)
        y = BCx.new_empty(BCx.shape[0], BCx.shape[-1] // 3)
        ops.mixer(BCx, y, self.prefix)
        output[: BCx.shape[0]] = self.out_proj(y)[0]
