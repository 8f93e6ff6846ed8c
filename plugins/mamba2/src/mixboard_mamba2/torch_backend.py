"""Backend ``mamba2_torch``: Mamba-2 in plain PyTorch, on any torch device.

Its facts are declarations.py's; torch is imported when the backend is
built (``torch_impl.py``), so listing and explaining stay fast.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from mixboard import Backend
from mixboard.kinds.mamba2 import Mamba2Spec

from .declarations import MAMBA2_TORCH


class Mamba2Torch(Backend):
    declaration = MAMBA2_TORCH

    @classmethod
    def builder(cls, spec: Mamba2Spec, env: Any):
        from mixboard.ops.slot_step import SlotStep  # imports torch: only when a model is built

        return partial(SlotStep.plan, conv_width=spec.d_conv)

    @classmethod
    def make_impl(cls, spec: Mamba2Spec, env: Any):
        from .torch_impl import Mamba2TorchImpl

        return Mamba2TorchImpl(spec)
