"""``moe_cpu``: each expert's two products on its weights stored as panels (``_panels.c``)."""

from __future__ import annotations

from .compiled import PANELS, CompiledKernel


class MoECpu(CompiledKernel):
    name = "moe_cpu"
    kind = "moe"
    devices = ("cpu",)
    dtypes = ("float32",)
    api_version = 1
    compiled = PANELS
    # each output sums its products in order, in one chain (linear_cpu's bound, for the same reason)
    tolerances = {"float32": 3e-5}
    description = ("every expert's gate/up and down weights stored once as 16-row panels; the rows sorted by "
                   "expert once, then per expert with rows one gated product (SwiGLU applied per tile) and one "
                   "down product; CPU, float32")

    @classmethod
    def make_impl(cls, spec, env):
        from .moe_impl import MoECpuImpl

        return MoECpuImpl(spec)
