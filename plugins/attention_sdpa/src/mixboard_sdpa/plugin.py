"""The entry point ``sdpa``: mixboard loads this module and asks it for backends."""

from mixboard import hookimpl

from .backend import SdpaAttention


@hookimpl
def mixboard_backends():
    return [SdpaAttention]
