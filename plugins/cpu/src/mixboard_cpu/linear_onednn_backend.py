"""``linear_onednn``: oneDNN's product, the weight laid out once as its ``layout`` option says."""

from __future__ import annotations

from mixboard import Backend
from mixboard.options import defaults

from .declarations import LINEAR_ONEDNN


class LinearOneDnn(Backend):
    declaration = LINEAR_ONEDNN

    @classmethod
    def make_impl(cls, spec, env, options=None):
        from .linear_onednn_impl import LinearOneDnnImpl

        return LinearOneDnnImpl(spec, (options or defaults(cls)).layout)  # None: called directly
