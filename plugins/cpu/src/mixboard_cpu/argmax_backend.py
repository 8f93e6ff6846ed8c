"""``argmax_cpu``: greedy sampling in one vectorized pass over each row (``_rows.c``)."""

from __future__ import annotations

from .compiled import ROWS, CompiledKernel
from .declarations import ARGMAX_CPU


class ArgmaxCpu(CompiledKernel):
    declaration = ARGMAX_CPU
    compiled = ROWS

    @classmethod
    def make_impl(cls, spec, env):
        from .argmax_impl import ArgmaxCpuImpl

        return ArgmaxCpuImpl(spec)
