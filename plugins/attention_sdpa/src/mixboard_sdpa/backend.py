"""``sdpa``: attention over the paged K/V cache in portable PyTorch.

This module is what listing and selection read; it does not import torch.
"""

from __future__ import annotations

from functools import partial

from mixboard import Backend


class SdpaAttention(Backend):
    name = "sdpa"
    kind = "attention"
    priority = 10
    devices = ("*",)
    dtypes = ("float32", "bfloat16", "float16")
    api_version = 1
    description = ("portable PyTorch: scaled_dot_product_attention over the paged cache; "
                   "decodes batched; explicit softmax only for logits soft-capping")

    @classmethod
    def builder(cls, spec, env):
        from .meta import build_meta, bytes_per_token  # imports torch: only when a model is built

        # Only state-layout facts (kv heads, head size, dtype) shape the metadata,
        # so layers that differ in window, cap or scale can share it.
        # The workspace lives as long as the builder: one per group, reused every step.
        return partial(build_meta, bytes_per_token=bytes_per_token(spec), workspace={})

    @classmethod
    def make_impl(cls, spec, env):
        from .impl import SdpaAttentionImpl

        return SdpaAttentionImpl(spec)
