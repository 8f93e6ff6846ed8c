"""``argmax_cpu``: greedy sampling in one vectorized pass over each row (``_rows.c``)."""

from __future__ import annotations

from .compiled import ROWS, CompiledKernel


class ArgmaxCpu(CompiledKernel):
    name = "argmax_cpu"
    kind = "argmax"
    devices = ("cpu",)
    dtypes = ("float32",)
    api_version = 1
    compiled = ROWS
    description = "each row's maximum in one vectorized pass, then its first index (NaN first, as torch); CPU, float32"

    @classmethod
    def make_impl(cls, spec, env):
        from .argmax_impl import ArgmaxCpuImpl

        return ArgmaxCpuImpl(spec)
