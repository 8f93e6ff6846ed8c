"""``mamba1_torch``: Mamba1 in portable PyTorch, on any torch device.

Declarations only; torch is imported when the backend is built
(``torch_impl.py``), so listing and selecting stay fast.
"""

from __future__ import annotations

from functools import partial

from mixboard import Backend


class Mamba1Torch(Backend):
    name = "mamba1_torch"
    kind = "mamba1"
    priority = 10
    devices = ("*",)
    dtypes = ("float32", "bfloat16", "float16")
    api_version = 1
    capture = "never"  # its decodes read SlotStep.decode_range, a per-step tuple; its prefills, ints
    description = "portable PyTorch: chunked selective scan for prefills, one fused step for decodes"

    @classmethod
    def builder(cls, spec, env):
        from mixboard.ops.slot_step import SlotStep  # imports torch: only when a model is built

        return partial(SlotStep.plan, conv_width=spec.d_conv)

    @classmethod
    def make_impl(cls, spec, env):
        from .torch_impl import Mamba1TorchImpl

        return Mamba1TorchImpl(spec)
