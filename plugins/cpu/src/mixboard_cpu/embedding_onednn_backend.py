"""``embedding_onednn``: a tied table stored once, transposed, for oneDNN's LM-head product."""

from __future__ import annotations

from mixboard import Backend


class EmbeddingOneDnn(Backend):
    name = "embedding_onednn"
    kind = "embedding"
    priority = 15  # below embedding_cpu's panels, above embedding_torch: pure Python, no build needed
    devices = ("cpu",)
    dtypes = ("float32",)  # oneDNN's float32 product; other dtypes go to embedding_torch
    api_version = 1
    description = ("a tied table stored once, column-major: the LM head is oneDNN's product over it as it "
                   "lies, a lookup reads strided rows; CPU, float32, tied tables")

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
