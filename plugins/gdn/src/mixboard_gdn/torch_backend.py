"""Backend ``gdn_torch``: Gated DeltaNet in plain PyTorch, on any torch device.

Its facts are declarations.py's; torch is imported when the backend is built (``torch_impl.py``), so
listing and explaining stay fast.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from mixboard import Backend

from .declarations import GDN_TORCH


class GdnTorch(Backend):
    declaration = GDN_TORCH

    @classmethod
    def builder(cls, spec: Any, env: Any):
        from mixboard.ops.slot_step import SlotStep  # imports torch: only when a model is built

        return partial(SlotStep.plan, conv_width=spec.d_conv)

    @classmethod
    def make_impl(cls, spec: Any, env: Any):
        from .torch_impl import GdnTorchImpl

        return GdnTorchImpl(spec)
