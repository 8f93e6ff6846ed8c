"""``short_conv_cpu``: LFM2's gated short conv in one C call per step (CPU, float32).

``y = C * conv(B * x)`` for every sequence of the step, prefills and decodes
alike, the conv states read and written where their slots lie
(``_gated_conv.c``). This module is what listing and selection read; it
imports neither torch nor the kernel.
"""

from __future__ import annotations

from functools import lru_cache, partial

from mixboard import Backend, compiled_kernels

from .declarations import MAX_WIDTH, SHORT_CONV_CPU

INSTALL_HINT = "reinstall mixboard-shortconv where a C compiler with OpenMP (gcc) is present, to build it"


@lru_cache(maxsize=None)
def kernel_unusable() -> str | None:
    """Why the kernel cannot serve (mixboard.compiled_kernels); None when it can."""
    return compiled_kernels.kernel_unusable("mixboard_shortconv._gated_conv")


class ShortConvCpu(Backend):
    declaration = SHORT_CONV_CPU

    @classmethod
    def check(cls, spec, env):
        reasons = []
        if problem := kernel_unusable():
            reasons.append(f"its compiled kernel mixboard_shortconv._gated_conv {problem} ({INSTALL_HINT})")
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
