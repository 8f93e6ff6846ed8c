"""``sdpa``: attention over the paged K/V cache in portable PyTorch.

This module is what listing and selection read; it does not import torch.
"""

from __future__ import annotations

from functools import partial

from mixboard import Backend
from mixboard.options import defaults

from .declarations import SDPA


class SdpaAttention(Backend):
    declaration = SDPA

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
