"""Backend ``gdn_fla``: Gated DeltaNet on fla-core's own Triton kernels (flash-linear-attention).

Its facts are declarations.py's; torch, triton and fla are imported when the backend is built
(``fla_impl.py``), so listing and explaining work without them. Written against fla-core 0.6 and Triton 3.

On CPU it runs only under Triton's interpreter (``TRITON_INTERPRET=1``), the lane that verifies the real
kernels without a GPU (tests/triton_interp, behind its shims); float32 only there, as the interpreter's
bfloat16 and float16 results are silently wrong.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from mixboard import Backend
from mixboard.triton_reasons import triton_reasons

from .declarations import GDN_FLA


class GdnFla(Backend):
    declaration = GDN_FLA

    @classmethod
    def check(cls, spec: Any, env: Any) -> list[str]:
        reasons = triton_reasons(env, (spec.dtype,))
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
