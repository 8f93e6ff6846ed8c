"""``short_conv_torch``: LFM2's gated short conv in portable PyTorch."""

from __future__ import annotations

from functools import partial

from mixboard import Backend

from .declarations import SHORT_CONV_TORCH


class ShortConvTorch(Backend):
    declaration = SHORT_CONV_TORCH

    @classmethod
    def builder(cls, spec, env):
        from mixboard.ops.slot_step import SlotStep  # imports torch: only when a model is built

        return partial(SlotStep.plan, conv_width=spec.conv_width)

    @classmethod
    def make_impl(cls, spec, env):
        from .torch_impl import ShortConvTorchImpl

        return ShortConvTorchImpl(spec)
