"""mixboard-sdpa: the portable attention backend ``sdpa`` (any torch device), and
``sdpa_cpu`` (CPU, float32: decodes in a C kernel over the paged cache)."""

from .backend import SdpaAttention
from .cpu_backend import SdpaCpuAttention

__all__ = ["SdpaAttention", "SdpaCpuAttention"]
