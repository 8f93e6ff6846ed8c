"""The cases of the kit: what a conforming backend must get right.

A case is a layer of one spec fed a few steps, as a runner would: each step
names the sequences it advances and by how many new tokens; a sequence
continues from what earlier steps left in its slot and blocks. Sequences get
scattered slots and shuffled blocks; slot 0 and block 0 (where a padded
block table points) belong to nobody. The runner compares every step's
output with the oracle's and checks that no record outside the step's
sequences changed.

Cases (per dtype; ids are ``name[dtype]``):

* ``ragged_prefill``: fresh prompts of different lengths in one step
* ``decode_after_prefill``: prompts, then four steps of batched decodes
* ``chunked_prefill``: a prompt fed in three chunks beside decodes and a fresh prompt
* ``mixed_batch``: decodes, continued prefills, fresh prompts (one of a single token) in one step
* ``long_prefill``: a 40-token prompt (many blocks and SSD chunks) beside a short one, then decodes
* ``isolation``: a sequence parked while others run, and a new one reusing a finished one's slot and blocks
* ``noncontiguous``: ``mixed_batch`` with inputs that are strided views, as a fused projection's slices are
* ``shared_metadata``: two layers with their own weights and state sharing each step's built metadata
* ``shape-<id>``: prompts, a continued prefill beside a fresh prompt, then decodes, for each swept shape
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import Any, Sequence

from ...state import PAGED
from .kinds import KindAdapter

CONTIGUOUS, STRIDED = "contiguous", "strided"


@dataclass(frozen=True)
class Seq:
    """One sequence's resources: its record in 'slots' pools and its blocks in 'paged' pools."""

    name: str
    slot: int
    blocks: tuple[int, ...]


@dataclass(frozen=True)
class Case:
    name: str
    what: str  # one line: what it checks
    spec: Any
    seqs: tuple[Seq, ...]
    steps: tuple[tuple[tuple[str, int], ...], ...]  # per step: (sequence, new tokens) pairs
    num_slots: int
    num_blocks: int
    block_size: int
    seed: int
    layers: int = 1  # layers sharing each step's metadata (one builder call per step)
    layout: str = CONTIGUOUS  # memory layout of the inputs

    @property
    def dtype(self) -> str:
        return self.spec.dtype

    @property
    def id(self) -> str:
        return f"{self.name}[{self.dtype}]"

    def seq(self, name: str) -> Seq:
        return next(s for s in self.seqs if s.name == name)

    def records(self, layout: str) -> int:
        """Records a pool of ``layout`` needs: blocks (paged) or slots."""
        return self.num_blocks if layout == PAGED else self.num_slots


def plan_case(name: str, what: str, spec: Any, steps: Sequence[Sequence[tuple[str, int]]], block_size: int,
              seed: int, reuse: dict[str, str] | None = None, **extra) -> Case:
    """A case whose sequences get scattered slots and shuffled blocks.

    ``reuse`` maps a sequence to a finished one whose slot and blocks it takes
    over (with what that one left there)."""
    reuse = reuse or {}
    order: list[str] = []
    total: dict[str, int] = {}
    last_step: dict[str, int] = {}
    for i, step in enumerate(steps):
        for seq, n in step:
            if seq not in total:
                order.append(seq)
                total[seq] = 0
            total[seq] += n
            last_step[seq] = i
    rng = random.Random(f"{name}/{seed}")
    own = [s for s in order if s not in reuse]
    num_slots = len(own) + 3
    slots = rng.sample(range(1, num_slots), len(own))  # slot 0 is nobody's
    need = {s: -(-total[s] // block_size) for s in order}
    num_blocks = sum(need.values()) + 3
    free = rng.sample(range(1, num_blocks), num_blocks - 1)  # block 0 is nobody's
    resources: dict[str, Seq] = {}
    for seq, slot in zip(own, slots):
        resources[seq] = Seq(seq, slot, tuple(free[:need[seq]]))
        del free[:need[seq]]
    for seq, donor in reuse.items():
        first = next(i for i, step in enumerate(steps) if any(s == seq for s, _ in step))
        if last_step[donor] >= first:
            raise ValueError(f"case {name}: {seq} reuses {donor}'s records while {donor} still runs")
        blocks = list(resources[donor].blocks[:need[seq]])
        more = need[seq] - len(blocks)
        blocks += free[:more]
        del free[:more]
        resources[seq] = Seq(seq, resources[donor].slot, tuple(blocks))
    return Case(name, what, spec, tuple(resources[s] for s in order), tuple(tuple(s) for s in steps),
                num_slots, num_blocks, block_size, seed, **extra)


# --------------------------------------------------------------------------- the steps of each case

RAGGED = [[("a", 5), ("b", 1), ("c", 11), ("d", 3)]]
DECODE_AFTER_PREFILL = [[("a", 6), ("b", 3), ("c", 9)]] + [[("a", 1), ("b", 1), ("c", 1)]] * 4
CHUNKED = [
    [("a", 5), ("b", 3)],
    [("b", 1), ("a", 4), ("c", 6)],
    [("b", 1), ("a", 7), ("c", 2)],
    [("a", 1), ("b", 1), ("c", 1)],
]
MIXED = [
    [("a", 4), ("b", 2), ("c", 6)],
    [("a", 1), ("c", 1), ("b", 3), ("d", 5), ("e", 1)],
    [("a", 1), ("b", 1), ("c", 1), ("d", 1), ("e", 1)],
    [("a", 1), ("d", 2), ("e", 3)],
]
LONG = [[("a", 40), ("b", 3)], [("a", 1), ("b", 1)], [("a", 1), ("b", 1)]]
ISOLATION = [
    [("a", 5), ("b", 7)],
    [("a", 1)],  # b is parked: its records must not move
    [("b", 1), ("c", 4)],
    [("b", 1), ("e", 6)],  # a is done; e takes its slot and blocks, with what a left there
    [("e", 1), ("b", 1), ("c", 1)],
]
SHAPE = [[("a", 7), ("b", 2)], [("a", 1), ("b", 4), ("c", 3)], [("a", 1), ("b", 1), ("c", 1)]]


def kind_cases(adapter: KindAdapter, spec_cls: type, dtype: str, block_size: int) -> list[Case]:
    """Every case of a kind for one dtype."""
    base = spec_cls(**{**adapter.base, "dtype": dtype})
    bs = block_size
    cases = [
        plan_case("ragged_prefill", "fresh prompts of different lengths in one step", base, RAGGED, bs, 1),
        plan_case("decode_after_prefill", "prompts, then steps of batched decodes", base, DECODE_AFTER_PREFILL, bs, 2),
        plan_case("chunked_prefill", "a prompt fed in chunks beside decodes and a fresh prompt", base, CHUNKED, bs, 3),
        plan_case("mixed_batch", "decodes, continued prefills and fresh prompts in one step", base, MIXED, bs, 4),
        plan_case("long_prefill", "a long prompt over many blocks and chunks, then decodes", base, LONG, bs, 5),
        plan_case("isolation", "a parked sequence, and a new one reusing a finished one's slot and blocks",
                  base, ISOLATION, bs, 6, reuse={"e": "a"}),
        plan_case("noncontiguous", "mixed_batch with strided inputs", base, MIXED, bs, 7, layout=STRIDED),
        plan_case("shared_metadata", "two layers sharing each step's built metadata", base, MIXED, bs, 8, layers=2),
    ]
    seen = {base}
    for shape_id, fields in adapter.shapes:
        spec = dataclasses.replace(base, **fields)
        if getattr(spec, "state_dtype", None) == dtype:  # state in the layer's own dtype: the default
            spec = dataclasses.replace(spec, state_dtype=None)
        if spec in seen:  # e.g. state_dtype=float32 on a float32 layer
            continue
        seen.add(spec)
        cases.append(plan_case(f"shape-{shape_id}", f"prompts, a continued prefill and decodes with {_fields(fields)}",
                               spec, SHAPE, bs, 100 + len(cases)))
    return cases


def _fields(fields: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in fields.items())
