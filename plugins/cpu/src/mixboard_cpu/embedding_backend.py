"""``embedding_cpu``: a tied table stored once as panels, for its lookups and its LM-head product."""

from __future__ import annotations

from .compiled import PANELS, CompiledKernel
from .declarations import EMBEDDING_CPU


class EmbeddingCpu(CompiledKernel):
    declaration = EMBEDDING_CPU
    compiled = PANELS

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
