"""``linear_onednn``: oneDNN's product, the weight laid out once as its ``layout`` option says."""

from __future__ import annotations

from mixboard import Backend, Option
from mixboard.options import defaults

# The three layouts benchmarks/README.md ("Projections") measures: packed is the fastest from about 16
# rows; as loaded costs no reorder at load and matches it for one-row decodes; column-major is what a
# tied table keeps (embedding_onednn). Which wins is the machine's: an operator measures and sets it.
LAYOUTS = ("packed", "as_loaded", "column_major")


class LinearOneDnn(Backend):
    name = "linear_onednn"
    kind = "linear"
    priority = 15  # below linear_cpu's panels, above F.linear (linear_torch): pure Python, no build needed
    devices = ("cpu",)
    dtypes = ("float32",)  # the packed float32 product; other dtypes go to linear_torch
    api_version = 1
    description = ("torch's oneDNN product, the weight laid out once at load (packed into oneDNN's blocked "
                   "layout unless the layout option says otherwise; F.linear where this torch has no oneDNN); "
                   "CPU, float32")
    options = (
        Option("layout", str, "packed", "how each weight is stored for the product: packed (reordered once into "
               "oneDNN's blocked layout), as_loaded (no reorder: quicker load), column_major (stored transposed)",
               choices=LAYOUTS),
    )

    @classmethod
    def make_impl(cls, spec, env, options=None):
        from .linear_onednn_impl import LinearOneDnnImpl

        return LinearOneDnnImpl(spec, (options or defaults(cls)).layout)  # None: called directly
