"""How close a backend must come to the oracle, per dtype.

A backend declares its own bounds in its declaration::

    class AcmeAttention(Backend):
        declaration = Declaration(name="acme_attn", kind="attention", ...,
                                  tolerances={"float32": 1e-5, "bfloat16": 2e-2})

Dtypes it leaves out take the kit's defaults below. The bound is on the
largest absolute difference between the backend's output and the oracle's
(the oracle computes in float64 and rounds to the layer's dtype). The kit's
inputs keep reference outputs of order one, so an absolute bound reads
like a relative one; the float32 default is the project's own target.
"""

from __future__ import annotations

from typing import Mapping

from ...dtypes import DTYPES

DEFAULT_TOLERANCES: Mapping[str, float] = {
    "float64": 1e-10,
    "float32": 1e-5,
    # Half precisions: a few units in the last place of an output of order one
    # (bfloat16 keeps 8 bits of mantissa, float16 11), after a handful of
    # roundings in the backend's own intermediate results.
    "bfloat16": 5e-2,
    "float16": 1e-2,
}


def tolerance_for(backend: type, dtype: str, override: Mapping[str, float] | None = None) -> float:
    """The bound for ``dtype``: a suite's ``override`` first, then the
    backend's ``tolerances`` attribute, then the kit's default."""
    for source in (override, getattr(backend, "tolerances", None)):
        if source and dtype in source:
            value = source[dtype]
            if not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"tolerance for {dtype} must be a positive number, not {value!r}")
            return float(value)
    if dtype not in DEFAULT_TOLERANCES:
        raise ValueError(f"no tolerance for dtype {dtype!r}; dtypes are {', '.join(DTYPES)}")
    return DEFAULT_TOLERANCES[dtype]
