"""The entry point ``gdn``: the kind ``gated_delta_net``, its portable backend and the one on fla-core's kernels."""

from mixboard import hookimpl

from .fla_backend import GdnFla
from .kind import GATED_DELTA_NET
from .torch_backend import GdnTorch


@hookimpl
def mixboard_kinds():
    return [GATED_DELTA_NET]


@hookimpl
def mixboard_backends():
    return [GdnTorch, GdnFla]
