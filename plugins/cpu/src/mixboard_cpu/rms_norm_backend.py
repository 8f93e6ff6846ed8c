"""``rms_norm_cpu``: the residual add and RMSNorm in one pass over each row (``_rows.c``)."""

from __future__ import annotations

from .compiled import ROWS, CompiledKernel
from .declarations import RMS_NORM_CPU


class RMSNormCpu(CompiledKernel):
    declaration = RMS_NORM_CPU
    compiled = ROWS

    @classmethod
    def make_impl(cls, spec, env):
        from .rms_norm_impl import RMSNormCpuImpl

        return RMSNormCpuImpl(spec)
