"""``short_conv_triton``: LFM2's gated short conv in Triton (``_conv.py``):
one kernel for any step, one for a step of decodes.

Its facts are declarations.py's; listing and selecting import neither torch nor triton.
"""

from __future__ import annotations

from functools import partial

from mixboard import Backend

from .availability import triton_reasons
from .declarations import SHORT_CONV_TRITON


class ShortConvTriton(Backend):
    declaration = SHORT_CONV_TRITON

    @classmethod
    def check(cls, spec, env):
        return triton_reasons(spec, env)

    @classmethod
    def builder(cls, spec, env):
        from mixboard.ops.slot_step import SlotStep  # imports torch: only when a model is built

        return partial(SlotStep.plan, conv_width=spec.conv_width)

    @classmethod
    def make_impl(cls, spec, env):
        from .short_conv_impl import ShortConvTritonImpl

        return ShortConvTritonImpl(spec)
