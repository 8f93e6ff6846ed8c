"""Backend ``mamba2_cpu``: ``mamba2_torch`` with its heavy passes in C.

On a CPU in float32 or bfloat16 (with the SSM state in float32, as vLLM
keeps a bfloat16 model's), four parts of a step run in one C call each
(``_prefill.c``): the ragged causal conv, the chunked scan of the prefills
(one (sequence, head) at a time, its chunks in cache, instead of ssd.py's
[heads, chunks, Q, Q] tensors) and the D skip with the gated RMSNorm; and
(``_decode.c``) the decodes' state update, each record updated where it
lies in the pool, with no gather or scatter. Its facts are declarations.py's;
listing and selection import neither torch nor the kernels.
"""

from __future__ import annotations

from functools import lru_cache, partial
from typing import Any

from mixboard import Backend, compiled_kernels
from mixboard.kinds.mamba2 import Mamba2Spec

from .declarations import MAMBA2_CPU

INSTALL_HINT = "reinstall mixboard-mamba2 where a C compiler with OpenMP (gcc) is present, to build it"


CONV_STATE_DTYPES = ("float32", "bfloat16")  # _prefill.c's conv and conv_bf16
KERNELS = ("mixboard_mamba2._prefill", "mixboard_mamba2._decode")  # built by the one setup.py


@lru_cache(maxsize=None)
def kernel_unusable() -> str | None:
    """Why the kernels cannot serve (mixboard.compiled_kernels), naming the first that cannot; None when
    both can."""
    for module in KERNELS:
        if problem := compiled_kernels.kernel_unusable(module):
            return f"{module} {problem}"
    return None


class Mamba2Cpu(Backend):
    declaration = MAMBA2_CPU

    @classmethod
    def check(cls, spec: Mamba2Spec, env: Any):
        reasons = []
        if problem := kernel_unusable():
            reasons.append(f"its compiled kernel {problem} ({INSTALL_HINT})")
        if spec.ssm_dtype != "float32":
            reasons.append(f"the kernels keep the SSM state in float32; the layer keeps it in {spec.ssm_dtype} "
                           "(state_dtype)")
        if spec.conv_dtype not in CONV_STATE_DTYPES:
            reasons.append(f"the conv kernel keeps its state in float32 or bfloat16; the layer keeps it in "
                           f"{spec.conv_dtype} (conv_state_dtype)")
        return reasons

    @classmethod
    def builder(cls, spec: Mamba2Spec, env: Any):
        from mixboard.ops.slot_step import SlotStep  # imports torch: only when a model is built

        return partial(SlotStep.plan, conv_width=spec.d_conv)

    @classmethod
    def make_impl(cls, spec: Mamba2Spec, env: Any):
        from .cpu_impl import Mamba2CpuImpl

        return Mamba2CpuImpl(spec)
