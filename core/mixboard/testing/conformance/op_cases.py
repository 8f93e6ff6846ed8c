"""The cases of a dense kind: steps of rows, each running every call of the
kind on every layer of the case (``ops.py`` says what a call is).

The quick mode, per dtype (ids ``name[dtype]``):

* ``rows``: steps of 1, 16 and 37 rows (one row, a block's worth, a ragged count)
* ``noncontiguous``: the same with every [T, ...] input a view into a wider buffer (rows padded,
  an offset), and the inputs a kind fuses (rotary's q and k) views of one buffer
* ``interleaved``: two layers (other weights; the adapter's ``neighbour`` fields) turn about over
  steps of 16, 16 and 1 rows: a per-layer or per-step memo kept in the wrong place fails
* ``shape-<id>``: one row, then 37 strided, for each swept shape

The thorough mode adds ``long-<id>``: one row, then ``long_rows`` strided, for each long shape.

Inputs with no rows (T = 0) are not a case: a runner never runs an op on none.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .cases import CONTIGUOUS, STRIDED
from .ops import OpAdapter


@dataclass(frozen=True)
class OpCase:
    name: str
    what: str  # one line: what it checks
    spec: Any
    steps: tuple[tuple[int, str], ...]  # per step: (rows, layout of the inputs)
    seed: int
    layers: int = 1
    neighbour: Any = None  # the spec of the odd layers, when they differ
    thorough: bool = False

    @property
    def dtype(self) -> str:
        return self.spec.dtype

    @property
    def id(self) -> str:
        return f"{self.name}[{self.dtype}]"

    @property
    def specs(self) -> tuple:
        """Each layer's spec."""
        return tuple(self.neighbour if (i % 2 and self.neighbour is not None) else self.spec
                     for i in range(self.layers))


def op_cases(adapter: OpAdapter, spec_cls: type, dtype: str, *, thorough: bool = False) -> list[OpCase]:
    """Every case of a dense kind for one dtype; with ``thorough`` the long ones too."""
    base = spec_cls(**{**adapter.base, "dtype": dtype})
    neighbour = dataclasses.replace(base, **adapter.neighbour) if adapter.neighbour else None
    c, s = CONTIGUOUS, STRIDED
    cases = [
        OpCase("rows", "steps of 1, 16 and 37 rows", base, ((1, c), (16, c), (37, c)), 1),
        OpCase("noncontiguous", "the same with strided inputs (views into a wider buffer)", base,
               ((1, s), (16, s), (37, s)), 2),
        OpCase("interleaved", "two layers of other weights turn about, steps of 16, 16 and 1 rows", base,
               ((16, c), (16, c), (1, c)), 3, layers=2, neighbour=neighbour),
    ]
    cases += _sweep(adapter.shapes, base, "shape", ((1, c), (37, s)), 100)
    if thorough:
        long = _sweep(adapter.long_shapes, base, "long", ((1, c), (adapter.long_rows, s)), 300)
        cases += [dataclasses.replace(case, thorough=True) for case in long]
    return cases


def _sweep(shapes, base, prefix: str, steps, seed: int) -> list[OpCase]:
    cases, seen = [], {base}
    for shape_id, fields in shapes:
        spec = dataclasses.replace(base, **fields)
        if spec in seen:
            continue
        seen.add(spec)
        what = ", ".join(f"{k}={v}" for k, v in fields.items())
        cases.append(OpCase(f"{prefix}-{shape_id}", f"one row, then {steps[-1][0]} strided, with {what}", spec, steps,
                            seed + len(cases)))
    return cases
