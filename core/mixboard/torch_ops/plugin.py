"""The entry point ``torch_ops``: mixboard's own portable dense backends."""

from ..hookspecs import hookimpl
from .backends import ArgmaxTorch, EmbeddingTorch, LinearTorch, RMSNormTorch, RotaryTorch


@hookimpl
def mixboard_backends():
    return [LinearTorch, RMSNormTorch, RotaryTorch, EmbeddingTorch, ArgmaxTorch]
