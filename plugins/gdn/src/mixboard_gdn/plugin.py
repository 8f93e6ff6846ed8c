"""The entry point ``gdn``: the kind ``gated_delta_net`` and its portable backend."""

from mixboard import hookimpl

from .kind import GATED_DELTA_NET
from .torch_backend import GdnTorch


@hookimpl
def mixboard_kinds():
    return [GATED_DELTA_NET]


@hookimpl
def mixboard_backends():
    return [GdnTorch]
