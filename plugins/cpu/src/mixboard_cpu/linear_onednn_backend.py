"""``linear_onednn``: oneDNN's product with the weight packed once into its blocked layout."""

from __future__ import annotations

from mixboard import Backend


class LinearOneDnn(Backend):
    name = "linear_onednn"
    kind = "linear"
    priority = 15  # below linear_cpu's panels, above F.linear (linear_torch): pure Python, no build needed
    devices = ("cpu",)
    dtypes = ("float32",)  # the packed float32 product; other dtypes go to linear_torch
    api_version = 1
    description = ("torch's oneDNN product, the weight packed once into oneDNN's blocked layout "
                   "(F.linear where this torch has no oneDNN); CPU, float32")

    @classmethod
    def make_impl(cls, spec, env):
        from .linear_onednn_impl import LinearOneDnnImpl

        return LinearOneDnnImpl(spec)
