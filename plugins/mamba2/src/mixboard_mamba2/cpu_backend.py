"""Backend ``mamba2_cpu``: ``mamba2_torch`` with the prefills' SSD scan in C.

On a CPU in float32, the chunked scan of a step's prefills runs in one C
call (``_ssd_prefill.c``): one (sequence, head) at a time, its chunks in
cache, instead of ssd.py's [heads, chunks, Q, Q] tensors. Decodes, the conv
and the gated norm are ``mamba2_torch``'s. Declarations only: listing and
selection import neither torch nor the kernel.
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache, partial
from typing import Any

from mixboard import Backend
from mixboard.kinds.mamba2 import Mamba2Spec

INSTALL_HINT = "reinstall mixboard-mamba2 where a C compiler with OpenMP (gcc) is present, to build it"


@lru_cache(maxsize=None)
def kernel_missing() -> bool:
    return importlib.util.find_spec("mixboard_mamba2._ssd_prefill") is None


class Mamba2Cpu(Backend):
    name = "mamba2_cpu"
    kind = "mamba2"
    priority = 20  # above mamba2_torch, which serves everything this does not
    devices = ("cpu",)
    dtypes = ("float32",)
    api_version = 1
    description = ("mamba2_torch with the prefills' SSD scan in C, one (sequence, head) at a time with its chunks "
                   "in cache; CPU, float32")

    @classmethod
    def check(cls, spec: Mamba2Spec, env: Any):
        reasons = []
        if kernel_missing():
            reasons.append(f"its compiled kernel mixboard_mamba2._ssd_prefill is not built ({INSTALL_HINT})")
        if spec.state_dtype not in (None, "float32"):
            reasons.append(f"the kernel keeps the state in float32; the layer asks for state_dtype {spec.state_dtype}")
        return reasons

    @classmethod
    def builder(cls, spec: Mamba2Spec, env: Any):
        from .step import plan_step

        return partial(plan_step, conv_width=spec.d_conv)

    @classmethod
    def make_impl(cls, spec: Mamba2Spec, env: Any):
        from .cpu_impl import Mamba2CpuImpl

        return Mamba2CpuImpl(spec)
