"""``short_conv_cpu``: LFM2's gated short conv in one C call per step (CPU, float32 or bfloat16).

``y = C * conv(B * x)`` for every sequence of the step, prefills and decodes
alike, the conv states read and written where their slots lie
(``_gated_conv.c``). This module is what listing and selection read; it
imports neither torch nor the kernel.
"""

from __future__ import annotations

from functools import lru_cache, partial

from mixboard import Backend, compiled_kernels

from .declarations import KERNELS, MAX_WIDTH, SHORT_CONV_CPU

INSTALL_HINT = "reinstall mixboard-shortconv where a C compiler with OpenMP (gcc) is present, to build it"


@lru_cache(maxsize=None)
def kernel_unusable(dtype: str = "float32") -> str | None:
    """Why the kernel for a ``dtype`` layer cannot serve (mixboard.compiled_kernels); None when it can."""
    # the bfloat16 build's source includes the float32 one's
    return compiled_kernels.kernel_unusable(KERNELS[dtype], includes=("_gated_conv.c",) if dtype != "float32" else ())


class ShortConvCpu(Backend):
    declaration = SHORT_CONV_CPU

    @classmethod
    def check(cls, spec, env):
        reasons = []
        if spec.dtype in KERNELS and (problem := kernel_unusable(spec.dtype)):  # other dtypes: the declaration's
            reasons.append(f"its compiled kernel {KERNELS[spec.dtype]} {problem} ({INSTALL_HINT})")
        if spec.state_dtype not in (None, spec.dtype):
            reasons.append(f"the kernel keeps the state in the layer's dtype ({spec.dtype}); the layer asks for "
                           f"state_dtype {spec.state_dtype}")
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
