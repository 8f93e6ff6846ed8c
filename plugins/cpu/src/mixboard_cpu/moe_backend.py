"""``moe_cpu``: each expert's two products on its weights stored as panels (``_panels.c``)."""

from __future__ import annotations

from .compiled import PANELS, CompiledKernel
from .declarations import MOE_CPU


class MoECpu(CompiledKernel):
    declaration = MOE_CPU
    compiled = PANELS

    @classmethod
    def make_impl(cls, spec, env):
        from .moe_impl import MoECpuImpl

        return MoECpuImpl(spec)
