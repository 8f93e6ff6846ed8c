"""``mamba1_cpu``: ``mamba1_torch`` with each decode-only step in one C call.

On a CPU in float32, a step whose rows are all decodes runs the C kernel
(``_decode_step.c``): conv, projections and state update per sequence,
straight from and into the state pools; prefills and mixed steps are
``mamba1_torch``'s. This module is what listing and selection read; it
imports neither torch nor the kernel.
"""

from __future__ import annotations

from functools import lru_cache, partial

from mixboard import Backend, compiled_kernels

from .declarations import MAMBA1_CPU

INSTALL_HINT = "reinstall mixboard-mamba1 where a C compiler with OpenMP (gcc) is present, to build it"


@lru_cache(maxsize=None)
def kernel_unusable() -> str | None:
    """Why the kernel cannot serve (mixboard.compiled_kernels); None when it can."""
    return compiled_kernels.kernel_unusable("mixboard_mamba1._decode_step")


class Mamba1Cpu(Backend):
    declaration = MAMBA1_CPU

    @classmethod
    def check(cls, spec, env):
        reasons = []
        if problem := kernel_unusable():
            reasons.append(f"its compiled kernel mixboard_mamba1._decode_step {problem} ({INSTALL_HINT})")
        for field in ("state_dtype", "conv_state_dtype"):
            if getattr(spec, field) not in (None, "float32"):
                reasons.append(f"the kernel keeps the states in float32; the layer asks for {field} "
                               f"{getattr(spec, field)}")
        return reasons

    @classmethod
    def builder(cls, spec, env):
        from mixboard.ops.slot_step import SlotStep

        return partial(SlotStep.plan, conv_width=spec.d_conv)

    @classmethod
    def make_impl(cls, spec, env):
        from .cpu_impl import Mamba1CpuImpl

        return Mamba1CpuImpl(spec)
