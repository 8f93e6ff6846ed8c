"""``mamba1_torch``: Mamba1 in portable PyTorch, on any torch device.

Its facts are declarations.py's; torch is imported when the backend is
built (``torch_impl.py``), so listing and selecting stay fast.
"""

from __future__ import annotations

from functools import partial

from mixboard import Backend

from .declarations import MAMBA1_TORCH


class Mamba1Torch(Backend):
    declaration = MAMBA1_TORCH

    @classmethod
    def builder(cls, spec, env):
        from mixboard.ops.slot_step import SlotStep  # imports torch: only when a model is built

        return partial(SlotStep.plan, conv_width=spec.d_conv)

    @classmethod
    def make_impl(cls, spec, env):
        from .torch_impl import Mamba1TorchImpl

        return Mamba1TorchImpl(spec)
