"""The entry point ``flash_attn``: mixboard loads this module and asks it for backends.

It imports no GPU library: flash_attn is imported only when a model is built.
"""

from mixboard import hookimpl

from .backend import FlashAttention


@hookimpl
def mixboard_backends():
    return [FlashAttention]
