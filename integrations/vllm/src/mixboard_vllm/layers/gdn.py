"""vLLM's Gated DeltaNet (Qwen3-Next's linear attention) on mixboard's kind ``gated_delta_net``:
in_proj_qkvz, in_proj_ba -> (qkv, z, b, a) -> backend -> vLLM's gated norm -> out_proj.

The kind is defined by the plugin mixboard-gdn, so its spec class is found by name in the
registry. The backend returns the output before the norm (``gated_norm=False``): vLLM's own
RMSNormGated and out_proj follow, as in its forward_cpu, so their fusions stay vLLM's."""

from __future__ import annotations

import torch
from vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn import QwenGatedDeltaNetAttention

from mixboard.dtypes import dtype_name

from .. import compat, ops
from ..errors import StartupError
from .base import MixboardLayer

KIND = "gated_delta_net"


def _kind_classes():
    """(spec class, weights class) of the kind, from whichever plugin defines it."""
    import importlib

    from mixboard.errors import UsageError
    from mixboard.registry import get_registry

    try:
        spec = get_registry().kind(KIND).spec
    except UsageError:
        raise StartupError(f"mixboard-vllm: Gated DeltaNet layers need the kind {KIND!r}, which no installed plugin "
                           "defines: pip install mixboard-gdn, or set MIXBOARD_VLLM=0 to let vLLM run this model") from None
    return spec, importlib.import_module(spec.__module__).GatedDeltaNetWeights


class MixboardGatedDeltaNet(MixboardLayer, QwenGatedDeltaNetAttention):
    mixboard_kind = KIND

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        compat.keep_raw_weights(self.conv1d)  # a linear to vLLM, which would repack it after loading
        self._mixboard_init([why for why, present in (
            (f"activation {self.activation}", self.activation != "silu"),
            ("speculative decoding", bool(self.num_spec)),
            ("LoRA", hasattr(self, "in_proj_qkv")),
        ) if present])

    def _spec(self):
        spec_class, _ = _kind_classes()
        tp = self.tp_size
        # the dtypes vLLM sized its pages for: a bfloat16 model keeps its recurrent state in float32
        conv_dtype, ssm_dtype = map(dtype_name, self.vllm_state_dtypes())
        return spec_class(num_k_heads=self.num_k_heads // tp, num_v_heads=self.num_v_heads // tp,
                          head_k_dim=self.head_k_dim, head_v_dim=self.head_v_dim, d_conv=self.conv_kernel_size,
                          conv_bias=self.conv1d.bias is not None, gated_norm=False, state_dtype=ssm_dtype,
                          conv_state_dtype=conv_dtype, dtype=dtype_name(self.model_config.dtype))

    def _mixboard_weights(self):
        if self._weights is None:
            _, weights_class = _kind_classes()
            w = self.conv1d.weight  # [conv_dim / tp, 1, d_conv]
            self._weights = weights_class(conv_weight=w.view(w.size(0), w.size(2)), conv_bias=self.conv1d.bias,
                                          dt_bias=self.dt_bias, A=-torch.exp(self.A_log.float()),  # float32, as vLLM's
                                          norm_weight=None)
        return self._weights

    def _kind_inputs(self, p):
        tp = self.tp_size
        qkv = (2 * self.key_dim + self.value_dim) // tp
        z, heads = self.value_dim // tp, self.num_v_heads // tp
        return p[:, :qkv], p[:, qkv:qkv + z], p[:, qkv + z:qkv + z + heads], p[:, qkv + z + heads:]

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        mixed_qkvz, _ = self.in_proj_qkvz(hidden_states)
        ba, _ = self.in_proj_ba(hidden_states)
        T = hidden_states.shape[0]
        if self.gqa_interleaved_layout:  # Qwen3-Next: per key head [q k v z] and [b a]
            q, k, v, z, b, a = self.fix_query_key_value_ordering(mixed_qkvz, ba)
            qkv = torch.cat([q.reshape(T, -1), k.reshape(T, -1), v.reshape(T, -1)], dim=-1)
        else:  # Qwen3.5: already [q k v | z] and [b | a]
            qkv_size = (2 * self.key_dim + self.value_dim) // self.tp_size
            qkv, z = mixed_qkvz.split([qkv_size, self.value_dim // self.tp_size], dim=-1)
            b, a = self.split_ba(ba)
        # one tensor through the opaque op (its signature is the same for every kind); z rides along, unread
        projected = torch.cat([qkv, z.reshape(T, -1), b, a], dim=-1)
        core = projected.new_empty(T, self.num_v_heads // self.tp_size, self.head_v_dim)
        ops.mixer(projected, core.view(T, -1), self.prefix)
        return self._output_projection(core, z.reshape(T, -1, self.head_v_dim))
