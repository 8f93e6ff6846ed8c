"""``mamba1_cpu``: ``mamba1_torch`` with each decode-only step in one C call.

On a CPU, a step whose rows are all decodes runs the C kernel
(``_decode_step.c``): conv, projections and state update per sequence,
straight from and into the state pools; prefills and mixed steps are
``mamba1_torch``'s. float32 and bfloat16 layers, the SSM state float32, the
conv state float32 or bfloat16 (vLLM's layout for a bfloat16 model on a CPU
with AVX512-BF16). This module is what listing and selection read; it
imports neither torch nor the kernel.
"""

from __future__ import annotations

from functools import lru_cache, partial

from mixboard import Backend, compiled_kernels

from .declarations import MAMBA1_CPU

INSTALL_HINT = "reinstall mixboard-mamba1 where a C compiler with OpenMP (gcc) is present, to build it"
CONV_STATE_DTYPES = ("float32", "bfloat16")  # _decode_step.c's step and step_bf16


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
        if spec.ssm_dtype != "float32":
            reasons.append(f"the kernel keeps the SSM state in float32; the layer keeps it in {spec.ssm_dtype} "
                           "(state_dtype)")
        if spec.conv_dtype not in CONV_STATE_DTYPES:
            reasons.append(f"the kernel keeps the conv state in float32 or bfloat16; the layer keeps it in "
                           f"{spec.conv_dtype} (conv_state_dtype)")
        return reasons

    @classmethod
    def builder(cls, spec, env):
        from mixboard.ops.slot_step import SlotStep

        return partial(SlotStep.plan, conv_width=spec.d_conv)

    @classmethod
    def make_impl(cls, spec, env):
        from .cpu_impl import Mamba1CpuImpl

        return Mamba1CpuImpl(spec)
