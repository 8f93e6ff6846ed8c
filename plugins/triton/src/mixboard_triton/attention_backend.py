"""``triton_attn``: attention over the paged K/V cache in one Triton kernel
(``_attention.py``), prefills and decodes alike.

Declarations only: listing and selecting import neither torch nor triton.
"""

from __future__ import annotations

from mixboard import Backend

from .availability import DEVICES, INSTALL_HINT, PRIORITY, triton_reasons

MAX_HEAD_SIZE = 256  # a program keeps a [64, head size] float32 accumulator and [32, head size] K and V tiles


class TritonAttention(Backend):
    name = "triton_attn"
    kind = "attention"
    priority = PRIORITY
    devices = DEVICES
    dtypes = ("float32", "bfloat16", "float16")
    requires = ("triton",)
    install_hint = INSTALL_HINT
    api_version = 1
    capture = "never"  # unverified without a GPU
    description = ("mixboard's Triton kernel: paged prefill and decode over the block table, GQA, sliding "
                   "window, soft cap; NVIDIA, AMD and Intel GPUs (cpu: Triton's interpreter, float32, tests only)")

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
