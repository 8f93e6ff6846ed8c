"""``embedding_cpu``: a tied table stored once as panels, for its lookups and its LM-head product."""

from __future__ import annotations

from .compiled import PANELS, CompiledKernel


class EmbeddingCpu(CompiledKernel):
    name = "embedding_cpu"
    kind = "embedding"
    devices = ("cpu",)
    dtypes = ("float32",)
    api_version = 1
    compiled = PANELS
    # each output sums its in_features products in order, in one chain (so the thread count never changes
    # a bit): its float32 error grows with in_features, past the kit's 1e-5 by in_features 2048
    tolerances = {"float32": 3e-5}
    description = ("a tied table stored once as 16-row panels: the LM head is linear_cpu's product over them, "
                   "a lookup reads a row out of them; CPU, float32, tied tables")

    @classmethod
    def check(cls, spec, env):
        reasons = super().check(spec, env)
        if not spec.tied:
            reasons.append("an untied table is only looked up, and rows read faster from the table as loaded "
                           "(row-major) than from panels: embedding_torch serves it")
        return reasons

    @classmethod
    def make_impl(cls, spec, env):
        from .embedding_impl import EmbeddingCpuImpl

        return EmbeddingCpuImpl(spec)
