"""acme-mixboard: ACME's attention backend ``acme_attn`` for mixboard."""

from .attention import AcmeAttention

__all__ = ["AcmeAttention"]
