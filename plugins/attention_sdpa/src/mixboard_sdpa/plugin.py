"""The entry point ``sdpa``: mixboard loads this module and asks it for its backends, ``sdpa`` and ``sdpa_cpu``."""

from mixboard import hookimpl

from .backend import SdpaAttention
from .cpu_backend import SdpaCpuAttention


@hookimpl
def mixboard_backends():
    return [SdpaAttention, SdpaCpuAttention]
