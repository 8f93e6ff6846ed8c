"""mixboard-sdpa: the portable attention backend ``sdpa`` (any torch device)."""

from .backend import SdpaAttention

__all__ = ["SdpaAttention"]
