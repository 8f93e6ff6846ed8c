"""What per-sequence state a layer keeps, described well enough for a runner
to allocate it without knowing the layer's kind.

Two layouts cover every kind that keeps state (a third, ``none``, is what
the dense ops keep: nothing):

* ``paged``: a record per *token*, stored in blocks of ``block_size`` tokens;
  a block table per sequence says which blocks it owns. A pool tensor named
  ``n`` with per-token shape ``s`` is ``[num_blocks, block_size, *s]``.
  Attention's K/V cache is paged.
* ``slots``: one fixed-size record per *sequence*. A pool tensor with
  per-sequence shape ``s`` is ``[num_slots, *s]``. Conv and SSM
  states live in slots.

A pool is ``[num_records, ...]``, where a record is a block of a paged pool
or a slot of a slots pool. Each record is contiguous. Records are
``stride(0)`` elements apart: at least a record's size, possibly more (any
number of elements). An engine that lays a layer's pools in one page per
record hands out such views: vLLM's hybrid cache keeps an attention layer's
K and V blocks, or a mamba layer's conv and SSM states, as slices of one
page, padded to the largest layer's page. What lies between records is not
the pool's. A backend must never write it, nor rely on what it holds. It
addresses record ``i`` at ``i * stride(0)``, never through a flat view of
the pool (``mixboard.ops.checks.record_stride`` gives the stride, or None
for a pool that breaks these rules). mixboard's runner allocates contiguous
pools (records back to back); the kit's case ``strided_pools`` lays records
in larger pages and checks the bytes between them.

Example: ``StateSpec.slots(conv=((256, 3), "float32"))`` is a conv state of
256 channels and width-1 = 3 columns per sequence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

PAGED = "paged"
SLOTS = "slots"
NONE = "none"  # a layer that keeps no state (the dense ops): nothing to allocate


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple[int, ...]
    dtype: str

    def nbytes(self) -> int:
        size = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2}[self.dtype]
        for dim in self.shape:
            size *= dim
        return size


@dataclass(frozen=True)
class StateSpec:
    layout: str
    tensors: tuple[tuple[str, TensorSpec], ...]
    # paged only: the pools' block size must be a multiple of this (flash-attn's paged kernel needs 256)
    block_multiple: int = 1

    def __post_init__(self):
        if self.layout not in (PAGED, SLOTS, NONE):
            raise ValueError(f"state layout must be {PAGED!r}, {SLOTS!r} or {NONE!r}, not {self.layout!r}")
        if self.layout == NONE and self.tensors:
            raise ValueError("a state of layout 'none' holds no tensors")
        if self.block_multiple < 1 or (self.layout == SLOTS and self.block_multiple != 1):
            raise ValueError("block_multiple must be a positive int, and applies to paged state only")

    @classmethod
    def paged(cls, *, block_multiple: int = 1, **tensors: tuple[tuple[int, ...], str]) -> "StateSpec":
        """Per-token records: ``StateSpec.paged(k=((heads, dim), "bfloat16"), ...)``."""
        return cls(PAGED, tuple((n, TensorSpec(tuple(s), d)) for n, (s, d) in tensors.items()), block_multiple)

    @classmethod
    def slots(cls, **tensors: tuple[tuple[int, ...], str]) -> "StateSpec":
        """Per-sequence records: ``StateSpec.slots(ssm=((heads, dim, d_state), "float32"))``."""
        return cls(SLOTS, tuple((n, TensorSpec(tuple(s), d)) for n, (s, d) in tensors.items()))

    @classmethod
    def none(cls) -> "StateSpec":
        """No state: what a dense op keeps."""
        return cls(NONE, ())

    def record_bytes(self) -> int:
        """Bytes of one record: one token (paged) or one sequence (slots)."""
        return sum(t.nbytes() for _, t in self.tensors)

    def to_dict(self) -> dict:
        out = {"layout": self.layout, "tensors": {n: {"shape": list(t.shape), "dtype": t.dtype} for n, t in self.tensors}}
        if self.block_multiple != 1:
            out["block_multiple"] = self.block_multiple
        return out


def same_records(a: StateSpec, b: StateSpec) -> bool:
    """Whether two backends keep a layer's state alike (layout and tensors), so that one can run its
    prefill rows and the other its decode rows; their block multiples may differ (``shared_state``)."""
    return (a.layout, a.tensors) == (b.layout, b.tensors)


def shared_state(a: StateSpec, b: StateSpec) -> StateSpec:
    """The state two backends of ``same_records`` share: blocks a multiple of what each needs."""
    if a.block_multiple == b.block_multiple:
        return a
    return StateSpec(a.layout, a.tensors, math.lcm(a.block_multiple, b.block_multiple))


def describe_state(state: StateSpec) -> str:
    """A state layout in a few words, for messages: ``paged k_cache [4, 64] float32, ...``."""
    if not state.tensors:
        return "no state"
    tensors = ", ".join(f"{n} {list(t.shape)} {t.dtype}" for n, t in state.tensors)
    multiple = f" (blocks of a multiple of {state.block_multiple})" if state.block_multiple != 1 else ""
    return f"{state.layout} {tensors}{multiple}"
