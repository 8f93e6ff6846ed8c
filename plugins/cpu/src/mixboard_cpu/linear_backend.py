"""``linear_cpu``: products on a weight stored as 16-row panels (``_panels.c``)."""

from __future__ import annotations

from .compiled import PANELS, CompiledKernel


class LinearCpu(CompiledKernel):
    name = "linear_cpu"
    kind = "linear"
    devices = ("cpu",)
    dtypes = ("float32",)
    api_version = 1
    compiled = PANELS
    # each output sums its in_features products in order, in one chain (so the thread count never changes
    # a bit): its float32 error grows with in_features, past the kit's 1e-5 by in_features 2048
    tolerances = {"float32": 3e-5}
    description = ("the weight stored once as 16-row panels, streamed once per call; gated: gate and up panels "
                   "interleaved, the SwiGLU gate applied per tile; CPU, float32")

    @classmethod
    def make_impl(cls, spec, env):
        from .linear_impl import LinearCpuImpl

        return LinearCpuImpl(spec)
