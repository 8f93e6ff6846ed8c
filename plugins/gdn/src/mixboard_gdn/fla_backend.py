"""Backend ``gdn_fla``: Gated DeltaNet on fla-core's own Triton kernels (flash-linear-attention).

Declarations only; torch, triton and fla are imported when the backend is built (``fla_impl.py``), so
listing and explaining work without them. Written against fla-core 0.6 and Triton 3.

On CPU it runs only under Triton's interpreter (``TRITON_INTERPRET=1``), the lane that verifies the real
kernels without a GPU (tests/triton_interp, behind its shims); float32 only there, as the interpreter's
bfloat16 and float16 results are silently wrong.
"""

from __future__ import annotations

import os
from functools import partial
from typing import Any

from mixboard import Backend


def triton_interpreter_on() -> bool:
    """Whether Triton runs its kernels in its interpreter, as Triton reads ``TRITON_INTERPRET``."""
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "on", "yes")


class GdnFla(Backend):
    name = "gdn_fla"
    kind = "gated_delta_net"
    priority = 100
    devices = ("cuda", "cpu")  # cpu: under Triton's interpreter only (check)
    dtypes = ("float32", "bfloat16", "float16")
    requires = ("fla", "triton")
    install_hint = "pip install 'mixboard-gdn[fla]' on a CUDA or ROCm machine (fla-core 0.6, Triton 3)"
    api_version = 1
    capture = "never"  # unverified without a GPU; plans like gdn_torch (SlotStep, per-step tuples)
    description = ("fla-core's Triton kernels: varlen chunked gated delta rule for prefills, fused recurrent "
                   "step for decodes (NVIDIA GPUs; AMD through ROCm, untested)")

    @classmethod
    def check(cls, spec: Any, env: Any) -> list[str]:
        reasons = []
        interpreted = triton_interpreter_on()
        if env.device == "cpu" and not interpreted:
            reasons.append("runs on cpu only under Triton's interpreter (TRITON_INTERPRET=1), a test lane thousands "
                           "of times slower than the CPU backends; on a GPU otherwise")
        elif interpreted and spec.dtype != "float32":
            reasons.append(f"Triton's interpreter (TRITON_INTERPRET=1) gives wrong {spec.dtype} results; "
                           "float32 only there")
        cap = env.capability  # NVIDIA's only: None on ROCm and where unknown
        if cap is not None and cap < (7, 0):
            reasons.append(f"Triton needs compute capability 7.0 or newer; this GPU has {env.capability_text}")
        elif cap is not None and cap < (8, 0) and spec.dtype == "bfloat16":
            reasons.append(f"bfloat16 needs compute capability 8.0 or newer; this GPU has {env.capability_text} "
                           "(use float16 or float32)")
        if spec.head_k_dim > 256:
            reasons.append(f"fla's chunked kernel keeps the state in 64-row blocks of at most 256 key dims; "
                           f"head_k_dim is {spec.head_k_dim}")
        return reasons

    @classmethod
    def builder(cls, spec: Any, env: Any):
        from mixboard.ops.slot_step import SlotStep  # imports torch: only when a model is built

        return partial(SlotStep.plan, conv_width=spec.d_conv)

    @classmethod
    def make_impl(cls, spec: Any, env: Any):
        from .fla_impl import GdnFlaImpl

        return GdnFlaImpl(spec)
