"""The portable backends' declarations (their impls import torch, on first use)."""

from __future__ import annotations

from ..backend import Backend
from ..declaration import Declaration

ALL_DTYPES = ("float32", "bfloat16", "float16")

# What every portable backend states: any device, every dtype, below the plugins' kernels.
PORTABLE = Declaration(priority=10, devices=("*",), dtypes=ALL_DTYPES, api_version=1)


class LinearTorch(Backend):
    declaration = PORTABLE(name="linear_torch", kind="linear",
                           description="F.linear; gated: one product, then silu(gate) * up")

    @classmethod
    def make_impl(cls, spec, env):
        from .linear import LinearTorchImpl

        return LinearTorchImpl(spec)


class RMSNormTorch(Backend):
    declaration = PORTABLE(name="rms_norm_torch", kind="rms_norm",
                           description="the add, then F.rms_norm (float32 statistics in every dtype)")

    @classmethod
    def make_impl(cls, spec, env):
        from .rms_norm import RMSNormTorchImpl

        return RMSNormTorchImpl(spec)


class RotaryTorch(Backend):
    declaration = PORTABLE(name="rotary_torch", kind="rotary",
                           description="a cos/sin table grown on demand; a step's rows gathered once for every layer")

    @classmethod
    def make_impl(cls, spec, env):
        from .rotary import RotaryTorchImpl

        return RotaryTorchImpl(spec)


class EmbeddingTorch(Backend):
    declaration = PORTABLE(name="embedding_torch", kind="embedding",
                           description="row lookup; a tied LM head is F.linear over the same table")

    @classmethod
    def make_impl(cls, spec, env):
        from .embedding import EmbeddingTorchImpl

        return EmbeddingTorchImpl(spec)


class ArgmaxTorch(Backend):
    declaration = PORTABLE(name="argmax_torch", kind="argmax",
                           description="torch.argmax over each row")

    @classmethod
    def make_impl(cls, spec, env):
        from .argmax import ArgmaxTorchImpl

        return ArgmaxTorchImpl(spec)


class MoETorch(Backend):
    declaration = PORTABLE(name="moe_torch", kind="moe",
                           description="routing in float32; the tokens sorted by expert once, each expert's two "
                                       "products on its rows")

    @classmethod
    def make_impl(cls, spec, env):
        from .moe import MoETorchImpl

        return MoETorchImpl(spec)


# What the entry point registers; a registry made from classes (Registry.from_backends) that runs a
# model adds these for the dense ops it does not replace.
PORTABLE_BACKENDS = (LinearTorch, RMSNormTorch, RotaryTorch, EmbeddingTorch, ArgmaxTorch, MoETorch)
