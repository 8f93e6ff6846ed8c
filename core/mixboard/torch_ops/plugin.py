"""The entry point ``torch_ops``: mixboard's own portable dense backends."""

from ..hookspecs import hookimpl
from .backends import PORTABLE_BACKENDS


@hookimpl
def mixboard_backends():
    return list(PORTABLE_BACKENDS)
