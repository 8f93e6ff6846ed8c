"""``rms_norm_cpu``: the residual add and RMSNorm in one pass over each row (``_rows.c``)."""

from __future__ import annotations

from .compiled import ROWS, CompiledKernel


class RMSNormCpu(CompiledKernel):
    name = "rms_norm_cpu"
    kind = "rms_norm"
    devices = ("cpu",)
    dtypes = ("float32",)
    api_version = 1
    compiled = ROWS
    description = ("one C pass per row: the branch's output added into the residual as the kind allows, then "
                   "the norm; heads of a fused product [T, heads, D] normalized where they lie; CPU, float32")

    @classmethod
    def make_impl(cls, spec, env):
        from .rms_norm_impl import RMSNormCpuImpl

        return RMSNormCpuImpl(spec)
