"""Toy backends: enough declarations to exercise listing and selection."""

from mixboard import Backend, hookimpl


class ToyAttention(Backend):
    name = "toy_attention"
    kind = "attention"
    priority = 1
    devices = ("*",)
    dtypes = ("float32", "bfloat16")
    api_version = 1


class ToyCudaAttention(Backend):
    name = "toy_cuda_attention"
    kind = "attention"
    priority = 50
    devices = ("cuda",)
    dtypes = ("float32", "bfloat16", "float16")
    requires = ("toy_missing_kernels",)
    install_hint = "pip install toy-missing-kernels"
    api_version = 1

    @classmethod
    def check(cls, spec, env):
        if env.capability is not None and env.capability < (8, 0):
            return [f"needs compute capability >= 8.0, this GPU has {env.capability_text}"]
        return []


class ToyShortConv(Backend):
    name = "toy_short_conv"
    kind = "short_conv"
    priority = 1
    devices = ("*",)
    dtypes = ("float32",)
    api_version = 1


@hookimpl
def mixboard_backends():
    return [ToyAttention, ToyCudaAttention, ToyShortConv]
