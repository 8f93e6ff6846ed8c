"""``short_conv_torch``: LFM2's gated short conv in portable PyTorch."""

from __future__ import annotations

from functools import partial

from mixboard import Backend


class ShortConvTorch(Backend):
    name = "short_conv_torch"
    kind = "short_conv"
    priority = 10
    devices = ("*",)
    dtypes = ("float32", "bfloat16", "float16")
    api_version = 1
    capture = "never"  # its decodes read SlotStep.decode_range, a per-step tuple; its ragged conv indexes in forward
    description = "portable PyTorch: one depthwise conv over the ragged step; decodes as one batched state update"

    @classmethod
    def builder(cls, spec, env):
        from mixboard.ops.slot_step import SlotStep  # imports torch: only when a model is built

        return partial(SlotStep.plan, conv_width=spec.conv_width)

    @classmethod
    def make_impl(cls, spec, env):
        from .torch_impl import ShortConvTorchImpl

        return ShortConvTorchImpl(spec)
