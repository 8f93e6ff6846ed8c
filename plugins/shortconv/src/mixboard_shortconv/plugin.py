"""The entry point ``shortconv``: mixboard loads this module and asks it for backends."""

from mixboard import hookimpl

from .cpu_backend import ShortConvCpu
from .cuda_backend import ShortConvCuda
from .torch_backend import ShortConvTorch


@hookimpl
def mixboard_backends():
    return [ShortConvTorch, ShortConvCpu, ShortConvCuda]
