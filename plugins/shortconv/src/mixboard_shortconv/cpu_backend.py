"""``short_conv_cpu``: LFM2's gated short conv in one C call per step (CPU, float32).

``y = C * conv(B * x)`` for every sequence of the step, prefills and decodes
alike, the conv states read and written where their slots lie
(``_gated_conv.c``). This module is what listing and selection read; it
imports neither torch nor the kernel.
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache, partial

from mixboard import Backend

INSTALL_HINT = "reinstall mixboard-shortconv where a C compiler with OpenMP (gcc) is present, to build it"
MAX_WIDTH = 8  # the kernel's window registers (_gated_conv.c)


@lru_cache(maxsize=None)
def kernel_missing() -> bool:
    return importlib.util.find_spec("mixboard_shortconv._gated_conv") is None


class ShortConvCpu(Backend):
    name = "short_conv_cpu"
    kind = "short_conv"
    priority = 20  # above short_conv_torch, which serves everything this does not
    devices = ("cpu",)
    dtypes = ("float32",)
    api_version = 1
    capture = "never"  # its kernel walks CommonBatchMetadata.sequence_rows, made once per step on first use
    description = ("the gated conv of a whole step in one C call, states read and written in their slots; "
                   f"CPU, float32, conv width up to {MAX_WIDTH}")

    @classmethod
    def check(cls, spec, env):
        reasons = []
        if kernel_missing():
            reasons.append(f"its compiled kernel mixboard_shortconv._gated_conv is not built ({INSTALL_HINT})")
        if spec.state_dtype not in (None, "float32"):
            reasons.append(f"the kernel keeps the state in float32; the layer asks for state_dtype {spec.state_dtype}")
        if spec.conv_width > MAX_WIDTH:
            reasons.append(f"conv width {spec.conv_width} is over the kernel's {MAX_WIDTH}")
        return reasons

    @classmethod
    def builder(cls, spec, env):
        from mixboard.ops.slot_step import SlotStep  # imports torch: only when a model is built

        return partial(SlotStep.plan, conv_width=spec.conv_width)

    @classmethod
    def make_impl(cls, spec, env):
        from .cpu_impl import ShortConvCpuImpl

        return ShortConvCpuImpl(spec)
