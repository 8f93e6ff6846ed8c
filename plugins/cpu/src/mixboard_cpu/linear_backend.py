"""``linear_cpu``: products on a weight stored as 16-row panels (``_panels.c``)."""

from __future__ import annotations

from .compiled import PANELS, CompiledKernel
from .declarations import LINEAR_CPU


class LinearCpu(CompiledKernel):
    declaration = LINEAR_CPU
    compiled = PANELS

    @classmethod
    def make_impl(cls, spec, env):
        from .linear_impl import LinearCpuImpl

        return LinearCpuImpl(spec)
