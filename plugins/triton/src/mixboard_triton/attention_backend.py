"""``triton_attn``: attention over the paged K/V cache in one Triton kernel
(``_attention.py``), prefills and decodes alike.

Its facts are declarations.py's; listing and selecting import neither torch nor triton.
"""

from __future__ import annotations

from mixboard import Backend

from .availability import triton_reasons
from .declarations import TRITON_ATTN

MAX_HEAD_SIZE = 256  # a program keeps a [64, head size] float32 accumulator and [32, head size] K and V tiles


class TritonAttention(Backend):
    declaration = TRITON_ATTN

    @classmethod
    def check(cls, spec, env):
        reasons = triton_reasons(spec, env)
        if spec.head_size > MAX_HEAD_SIZE:
            reasons.append(f"head_size {spec.head_size} is above the kernel's {MAX_HEAD_SIZE}")
        return reasons

    @classmethod
    def make_impl(cls, spec, env):
        from .attention_impl import TritonAttentionImpl

        return TritonAttentionImpl(spec)
