"""vLLM's MambaMixer2 on mixboard's mamba2 kind: in_proj -> (z, xBC, dt) -> backend -> out_proj."""

from __future__ import annotations

import torch
from vllm.model_executor.layers.mamba.mamba_mixer2 import MambaMixer2

from mixboard.dtypes import dtype_name

from .. import compat, ops
from .base import MixboardLayer, state_dtype_fields


class MixboardMambaMixer2(MixboardLayer, MambaMixer2):
    mixboard_kind = "mamba2"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        compat.keep_raw_weights(self.conv1d)
        # vLLM's own gated norm runs after the backend (Mamba2Spec.gated_norm=False) where a norm
        # group spans ranks (one group sharded by heads: vLLM all-reduces its variance, which a
        # backend cannot) or the model has no norm (the gate alone)
        self._norm_outside = not self.use_rms_norm or self.norm.n_groups % self.tp_size != 0
        self._mixboard_init([why for why, present in (
            (f"activation {self.activation}", self.activation != "silu"),
            ("speculative decoding", bool(self.num_spec) or bool(getattr(self, "use_replayssm", False))),
        ) if present])

    def _spec(self):
        from mixboard import Mamba2Spec

        mc = self.model_config
        dtype = dtype_name(mc.dtype)
        return Mamba2Spec(num_heads=self.num_heads // self.tp_size, head_dim=self.head_dim,
                          d_state=self.ssm_state_size, n_groups=self.n_groups // self.tp_size,
                          d_conv=self.conv_kernel_size, chunk_size=compat.mamba_chunk_size(mc),
                          conv_bias=self.conv1d.bias is not None, norm_eps=float(self.norm.variance_epsilon),
                          gated_norm=not self._norm_outside, dtype=dtype,
                          **state_dtype_fields(dtype, self.vllm_state_dtypes()))

    def get_kv_cache_spec(self, vllm_config):
        return compat.base_mamba_kv_cache_spec(self, vllm_config)

    def _mixboard_weights(self):
        if self._weights is None:
            from mixboard import Mamba2Weights

            self._weights = Mamba2Weights(conv_weight=self.conv_weights, conv_bias=self.conv1d.bias,
                                          dt_bias=self.dt_bias, A=self.A.float(),  # as vLLM keeps it, unrounded
                                          D=self.D, norm_weight=None if self._norm_outside else self.norm.weight)
        return self._weights

    def _kind_inputs(self, p):
        DI, CD, H = self.tped_intermediate_size, self.tped_conv_size, self.tped_dt_size
        return p[:, :DI], p[:, DI:DI + CD], p[:, DI + CD:DI + CD + H]

    def forward(self, hidden_states: torch.Tensor, mup_vector: torch.Tensor | None = None):
        projected, _ = self.in_proj(hidden_states)
        if mup_vector is not None:
            projected = projected * mup_vector
        y = projected.new_empty(projected.shape[0], self.tped_intermediate_size)
        ops.mixer(projected, y, self.prefix)
        if self._norm_outside:
            y = self.norm(y, projected[..., : self.tped_intermediate_size])
        out, _ = self.out_proj(y)
        return out
