"""``embedding_onednn``: a tied table stored once, transposed, for oneDNN's LM-head product."""

from __future__ import annotations

from mixboard import Backend

from .declarations import EMBEDDING_ONEDNN


class EmbeddingOneDnn(Backend):
    declaration = EMBEDDING_ONEDNN

    @classmethod
    def check(cls, spec, env):
        if not spec.tied:
            return ["an untied table is only looked up, and rows read faster from the table as loaded "
                    "(row-major) than transposed: embedding_torch serves it"]
        return []

    @classmethod
    def make_impl(cls, spec, env):
        from .embedding_onednn_impl import EmbeddingOneDnnImpl

        return EmbeddingOneDnnImpl(spec)
