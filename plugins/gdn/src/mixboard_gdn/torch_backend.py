"""Backend ``gdn_torch``: Gated DeltaNet in plain PyTorch, on any torch device.

Declarations only; torch is imported when the backend is built (``torch_impl.py``), so listing and
explaining stay fast.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from mixboard import Backend


class GdnTorch(Backend):
    name = "gdn_torch"
    kind = "gated_delta_net"
    priority = 10
    devices = ("*",)
    dtypes = ("float32", "bfloat16", "float16")
    api_version = 1
    capture = "never"  # its decodes read SlotStep.decode_range, a per-step tuple; its prefills loop over ints
    description = "Gated DeltaNet in PyTorch: chunked prefill scan, batched decode step (any torch device)"

    @classmethod
    def builder(cls, spec: Any, env: Any):
        from mixboard.ops.slot_step import SlotStep  # imports torch: only when a model is built

        return partial(SlotStep.plan, conv_width=spec.d_conv)

    @classmethod
    def make_impl(cls, spec: Any, env: Any):
        from .torch_impl import GdnTorchImpl

        return GdnTorchImpl(spec)
