"""``short_conv_triton``: LFM2's gated short conv in Triton (``_conv.py``):
one kernel for any step, one for a step of decodes.

Declarations only: listing and selecting import neither torch nor triton.
"""

from __future__ import annotations

from functools import partial

from mixboard import Backend

from .availability import DEVICES, INSTALL_HINT, PRIORITY, triton_reasons


class ShortConvTriton(Backend):
    name = "short_conv_triton"
    kind = "short_conv"
    priority = PRIORITY
    devices = DEVICES
    dtypes = ("float32", "bfloat16", "float16")
    requires = ("triton",)
    install_hint = INSTALL_HINT
    api_version = 1
    capture = "never"  # unverified without a GPU; plans like short_conv_torch (SlotStep)
    description = ("mixboard's Triton kernels: y = C * conv(B * x) over a ragged step, and the one-token step, "
                   "states read and written in their slots; any conv width")

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
