"""vLLM attention backend whose impl runs each layer on the mixboard backend planned for it.

vLLM picks one attention backend class per process (its selector never sees a layer name:
v1/attention/selector.py), so this one class serves every attention layer and the per-layer
choice is the plan's, looked up by ``layer.layer_name`` at first forward.
"""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

import torch
from vllm.v1.attention.backend import (
    AttentionBackend, AttentionImpl, AttentionType, MultipleOf,
)
from vllm.v1.kv_cache_interface import KVCacheLayout

from mixboard.dtypes import dtype_name

from . import compat, state
from .batch import to_common, to_uniform_common
from .builder import GroupsBuilder
from .errors import StartupError
from .plan import process_plan


class MixboardAttentionBackend(AttentionBackend):
    forward_includes_kv_cache_update: bool = True  # mixboard's attention kind writes k and v itself
    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float16, torch.bfloat16, torch.float32]
    supported_kv_cache_dtypes: ClassVar[list[str]] = ["auto"]  # mixboard's pools are in the layer dtype

    @staticmethod
    def get_name() -> str:
        return "CPU_ATTN"  # Attention.__init__ does AttentionBackendEnum[get_name()]: the member we override

    @staticmethod
    def get_impl_cls():
        return MixboardAttentionImpl

    @staticmethod
    def get_builder_cls():
        return MixboardAttentionBuilder

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec=None):
        # chosen in the engine process, which has no plan: the builder checks the plan's block_multiple
        return [MultipleOf(1)]

    @classmethod
    def supported_kv_cache_layouts(cls):
        # LHBNC: the k|v slot axis outside the block axis, so pools are contiguous. Hybrids need a
        # block-compact layout (v1/attention/backends/utils.py:296): LBHNC, pools strided in dim 0.
        return (KVCacheLayout.LHBNC, KVCacheLayout.LBHNC)

    @classmethod
    def customize_spec(cls, spec):
        # one head slot per canonical pool (k_cache, v_cache), each token [kv_heads, head_size]
        esize = torch.empty((), dtype=spec.dtype).element_size()
        return replace(spec, num_head_slots=2, state_content_bytes=spec.num_kv_heads * spec.head_size * esize)

    @classmethod
    def supports_sliding_window(cls) -> bool:
        return True

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type == AttentionType.DECODER


class MixboardCustomAttentionBackend(MixboardAttentionBackend):
    """The same, registered as CUSTOM: on CUDA the user selects it (--attention-backend CUSTOM)."""

    @staticmethod
    def get_name() -> str:
        return "CUSTOM"


class MixboardAttentionBuilder(GroupsBuilder):
    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.block_size = kv_cache_spec.block_size
        need = self.plan.plan.block_multiple
        if self.block_size % need:
            raise StartupError(f"mixboard-vllm: layers {layer_names[0]}...: vLLM's block size {self.block_size} is not "
                               f"a multiple of {need}, which the planned attention backends need; pass "
                               f"block_size={need * max(1, self.block_size // need)} (--block-size)")

    def translate(self, cm, *, uniform: bool, keep: bool = False):
        if uniform:
            return to_uniform_common(cm, self.block_size, keep=keep)
        return to_common(cm, self.block_size, paged=True)


def attention_spec(name: str, layer):
    """vLLM Attention layer -> mixboard AttentionSpec, per rank (vLLM has already sharded the heads)."""
    from mixboard import AttentionSpec

    impl = layer.impl
    unsupported = list(impl.unsupported)
    head_size_v = getattr(layer, "head_size_v", impl.head_size)
    if head_size_v != impl.head_size:  # vLLM's output and value views are head_size_v wide
        unsupported.append(f"value heads of {head_size_v} beside key heads of {impl.head_size}")
    if unsupported:
        raise StartupError(f"mixboard-vllm: layer {name} uses {', '.join(unsupported)}, which mixboard's "
                           "attention kind does not describe; set MIXBOARD_VLLM=0 to let vLLM run this model")
    return AttentionSpec(num_heads=impl.num_heads, num_kv_heads=impl.num_kv_heads, head_size=impl.head_size,
                         scale=impl.scale, causal=True, sliding_window=impl.sliding_window,
                         logits_soft_cap=impl.logits_soft_cap or None, dtype=dtype_name(layer.dtype))


class MixboardAttentionImpl(AttentionImpl):
    mixboard_kind = "attention"  # the plan's question (mixer.py), answered for the layer that holds this impl

    def mixboard_spec(self, name: str, layer):
        return attention_spec(name, layer)

    def __init__(self, num_heads, head_size, scale, num_kv_heads=None, alibi_slopes=None, sliding_window=None,
                 kv_cache_dtype="auto", logits_soft_cap=None, attn_type=AttentionType.DECODER,
                 kv_sharing_target_layer_name=None, **extra):
        self.num_heads, self.head_size, self.scale = num_heads, head_size, float(scale)
        self.num_kv_heads = num_kv_heads or num_heads
        self.sliding_window, self.logits_soft_cap = sliding_window, logits_soft_cap
        self.kv_cache_dtype = kv_cache_dtype
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name
        # what mixboard's attention kind cannot describe: refused, by layer, when the plan is made
        self.unsupported = [why for why, present in (
            ("ALiBi", alibi_slopes is not None), (f"kv_cache_dtype={kv_cache_dtype}", kv_cache_dtype != "auto"),
            (f"attention type {attn_type}", attn_type != AttentionType.DECODER),
            ("cross-layer KV sharing", kv_sharing_target_layer_name is not None)) if present]
        self.unsupported += [key for key, value in extra.items() if value is not None and value is not False]
        self._bound = None
        self._pools = state.PoolViews(state.paged_pools)

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output, output_scale=None,
                output_block_scale=None):
        if attn_metadata is None:  # vLLM's profile run
            return output
        bound = self._bound
        if bound is None:
            bound = self._bound = process_plan().layer(layer.layer_name)
        T = attn_metadata.common.num_tokens
        rows = output
        if query.shape[0] != T:  # rows past T are vLLM's padding (each slice is a view to make: only when needed)
            query, key, value, rows = query[:T], key[:T], value[:T], output[:T]
        out = bound.impl.forward(query, key, value, self._pools(kv_cache, bound), attn_metadata.metas[bound.group])
        rows.copy_(out if out.shape == rows.shape else out.reshape(rows.shape))
        return output
