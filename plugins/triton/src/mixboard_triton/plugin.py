"""The entry point ``triton``: mixboard loads this module and asks it for backends."""

from mixboard import hookimpl

from .attention_backend import TritonAttention
from .mamba1_backend import Mamba1Triton
from .moe_backend import MoETriton
from .short_conv_backend import ShortConvTriton


@hookimpl
def mixboard_backends():
    return [TritonAttention, ShortConvTriton, Mamba1Triton, MoETriton]
