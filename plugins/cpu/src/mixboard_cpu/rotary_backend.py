"""``rotary_cpu``: q and k rotated in place, reading the cos/sin table by position (``_rows.c``)."""

from __future__ import annotations

from .compiled import ROWS, CompiledKernel
from .declarations import ROTARY_CPU


class RotaryCpu(CompiledKernel):
    declaration = ROTARY_CPU
    compiled = ROWS

    @classmethod
    def make_impl(cls, spec, env):
        from .rotary_impl import RotaryCpuImpl

        return RotaryCpuImpl(spec)
