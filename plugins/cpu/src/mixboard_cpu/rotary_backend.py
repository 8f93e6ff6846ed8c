"""``rotary_cpu``: q and k rotated in place, reading the cos/sin table by position (``_rows.c``)."""

from __future__ import annotations

from .compiled import ROWS, CompiledKernel


class RotaryCpu(CompiledKernel):
    name = "rotary_cpu"
    kind = "rotary"
    devices = ("cpu",)
    dtypes = ("float32",)
    api_version = 1
    compiled = ROWS
    description = ("q and k rotated in place in one C call (one for both where k follows q in one buffer), "
                   "the table read by position: no gathered rows, no rotated copy; CPU, float32")

    @classmethod
    def make_impl(cls, spec, env):
        from .rotary_impl import RotaryCpuImpl

        return RotaryCpuImpl(spec)
