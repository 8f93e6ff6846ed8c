"""mixboard-flash-attn: the attention backend ``flash_attn`` (CUDA, flash-attn 2)."""

from .backend import FlashAttention

__all__ = ["FlashAttention"]
