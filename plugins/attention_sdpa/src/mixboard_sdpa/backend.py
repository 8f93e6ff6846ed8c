"""``sdpa``: attention over the paged K/V cache in portable PyTorch.

This module is what listing and selection read; it does not import torch.
"""

from __future__ import annotations

from functools import partial

from mixboard import Backend, Option
from mixboard.options import defaults


class SdpaAttention(Backend):
    name = "sdpa"
    kind = "attention"
    priority = 10
    devices = ("*",)
    dtypes = ("float32", "bfloat16", "float16")
    api_version = 1
    capture = "never"  # its decodes are planned per step as Python ints and gathers whose shapes change (meta.py)
    description = ("portable PyTorch: scaled_dot_product_attention over the paged cache; "
                   "decodes batched; explicit softmax only for logits soft-capping")
    # The decodes' keys and values are gathered into two workspaces of up to this size each, reused every
    # step: larger means fewer, larger attention calls per step; smaller bounds the memory the step holds.
    options = (
        Option("decode_chunk_mib", int, 64, "MiB of gathered keys (and again of values) per batched decode call: "
               "more is fewer calls, less bounds the workspace each attention group keeps", minimum=1),
    )

    @classmethod
    def builder(cls, spec, env, options=None):
        from .meta import build_meta, bytes_per_token  # imports torch: only when a model is built

        options = options or defaults(cls)  # called directly, or by a subclass's builder: the defaults
        # Only state-layout facts (kv heads, head size, dtype) shape the metadata,
        # so layers that differ in window, cap or scale can share it.
        # The workspace lives as long as the builder: one per group, reused every step.
        return partial(build_meta, bytes_per_token=bytes_per_token(spec), workspace={},
                       chunk_bytes=options.decode_chunk_mib << 20)

    @classmethod
    def make_impl(cls, spec, env, options=None):
        from .impl import SdpaAttentionImpl

        return SdpaAttentionImpl(spec)
