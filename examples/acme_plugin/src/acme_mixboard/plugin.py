"""The entry point ``acme``: mixboard loads this module and asks it for backends."""

from mixboard import hookimpl

from .attention import AcmeAttention


@hookimpl
def mixboard_backends():
    return [AcmeAttention]
