"""The cases of the kit: what a conforming backend must get right.

A case is a layer of one spec fed a few steps, as a runner would: each step
names the sequences it advances and by how many new tokens; a sequence
continues from what earlier steps left in its slot and blocks. Sequences get
scattered slots and shuffled blocks (a sequence's blocks are never in
increasing order, but in ``consecutive_slots``); slot 0 and block 0 (where a
padded block table points) belong to nobody. The runner compares every step's output with the
oracle's and checks that no record outside the step's sequences changed.

Two modes (``modes.py``). The quick one, the default, runs per dtype (ids ``name[dtype]``):

* ``ragged_prefill``: fresh prompts of different lengths in one step
* ``decode_after_prefill``: prompts, then four steps of batched decodes
* ``chunked_prefill``: a prompt fed in three chunks beside decodes and a fresh prompt
* ``mixed_batch``: decodes, continued prefills, fresh prompts (one of a single token) in one step
* ``long_prefill``: a 40-token prompt (many blocks and SSD chunks) beside a short one, then decodes
* ``isolation``: a sequence parked while others run, and a new one reusing a finished one's slot and blocks
* ``noncontiguous``: ``mixed_batch`` with inputs that are strided views, as a fused projection's slices are,
  and per-head inputs ([T, H, D]) dense with their heads outermost (a transpose of [H, T, D])
* ``shared_metadata``: two layers with their own weights and state sharing each step's built metadata
* ``many_sequences``: 40 sequences, then a step of 33 decodes beside 3 continued prefills and 4 fresh prompts
* ``consecutive_slots``: decodes of sequences whose slots and blocks were handed out in order
* ``strided_pools``: ``consecutive_slots`` with the pools laid out as an engine's hybrid cache lays them: each
  record in a larger page, the padding between records poisoned and checked, block tables padded with a real block
* ``block_size16``, ``block_size7``: prompts and decodes over blocks of 16 and 7 tokens (paged state only)
* ``prefill_300``: a 300-token prompt beside short ones, then continued, at the kind's real sizes
* ``shape-<id>``: prompts, a continued prefill beside a fresh prompt, then decodes, for each swept shape
* ``<variant>-<case>``: ``ragged_prefill``, ``chunked_prefill``, ``decode_after_prefill`` and ``mixed_batch``
  again for each variant of the kind's contract (``KindAdapter.variants``; mamba2's ``no_gated_norm``)
* ``capture_decode``, ``capture_mixed``: steps of decodes, or of any mix, replayed from a recorded step's
  metadata refilled in place, with no host sync in forward: for a backend that declares it may be captured
  in a graph (``capture.py``; skipped for the others)

The thorough mode adds the long cases, at the kind's real sizes:

* ``prefill_4096``: a 4096-token prompt beside short ones, then decodes
* ``long_chunked_prefill``: a 2500-token prompt in chunks of 1024 beside decodes and a fresh prompt
* ``long_decode``: 40 steps of decodes after prompts of 1000, 490, 250 and 3 tokens
* ``many_sequences_96``: ``many_sequences`` with 96 sequences and prompts of up to 64 tokens
* ``long-<id>``: a 700-token prompt continued by 333 tokens, for each of the kind's long shapes
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import Any, Sequence

from ...capture import ANY, UNIFORM_DECODE
from ...state import PAGED
from . import schedules as S
from .kinds import KindAdapter

CONTIGUOUS, STRIDED = "contiguous", "strided"  # how a case lays out its inputs, and its pools (see pages.py)


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
    pools: str = CONTIGUOUS  # of the pools: STRIDED puts each record in a larger page (pages.py)
    thorough: bool = False  # a long case: run in the thorough mode only
    capture: str | None = None  # the capture level (mixboard.capture) a case of capture.py checks

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

    @property
    def pad_block(self) -> int:
        """The block id that pads the block tables: 0, or in a case laid out as an engine's cache a real
        block no sequence owns (the last one), as an engine may leave any real id there."""
        return self.num_blocks - 1 if self.pools == STRIDED else 0


def plan_case(name: str, what: str, spec: Any, steps: Sequence[Sequence[tuple[str, int]]], block_size: int,
              seed: int, reuse: dict[str, str] | None = None, in_order: bool = False, **extra) -> Case:
    """A case whose sequences get scattered slots and shuffled blocks.

    ``reuse`` maps a sequence to a finished one whose slot and blocks it takes
    over (with what that one left there). ``in_order``: slots and blocks handed
    out in order instead, from 2 on (slot and block 1 stay free neighbours)."""
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
    need = {s: -(-total[s] // block_size) for s in order}
    num_blocks = sum(need.values()) + 3
    if in_order:
        slots, free = list(range(2, 2 + len(own))), list(range(2, num_blocks))
    else:
        slots = rng.sample(range(1, num_slots), len(own))  # slot 0 is nobody's
        free = rng.sample(range(1, num_blocks), num_blocks - 1)  # block 0 is nobody's
    resources: dict[str, Seq] = {}
    for seq, slot in zip(own, slots):
        resources[seq] = Seq(seq, slot, _shuffled(free[:need[seq]], in_order))
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


def plan_capture_case(name: str, what: str, spec: Any, steps: Sequence[Sequence[tuple[str, int]]], block_size: int,
                      seed: int, level: str) -> Case:
    """A case of ``capture.py``: the sequences of the first step of decodes (the one recorded) get
    consecutive slots from 2 and the lowest blocks; the others, slots apart and in no order, and blocks
    above a gap. So a replayed step differs from the recorded one in every place a forward could have
    kept: its slots, blocks, block range, context lengths and longest sequence."""
    total: dict[str, int] = {}
    for step in steps:
        for seq, n in step:
            total[seq] = total.get(seq, 0) + n
    recorded = [seq for seq, _ in steps[1]]  # the step after the prompts
    others = [seq for seq in total if seq not in recorded]
    top = 2 + len(recorded) + 2 * len(others)
    slots = {seq: 2 + i for i, seq in enumerate(recorded)} | {seq: top - 2 * i for i, seq in enumerate(others)}
    rng = random.Random(f"{name}/{seed}")
    need = {seq: -(-n // block_size) for seq, n in total.items()}
    low, high = sum(need[s] for s in recorded), sum(need[s] for s in others)
    # block 0 is nobody's; a gap of 2 blocks between the groups
    pools = (rng.sample(range(1, 1 + low), low), rng.sample(range(low + 3, low + 3 + high), high))
    seqs = []
    for group, pool in zip((recorded, others), pools):
        for seq in group:
            seqs.append(Seq(seq, slots[seq], _shuffled(pool[:need[seq]], False)))
            del pool[:need[seq]]
    return Case(name, what, spec, tuple(seqs), tuple(tuple(s) for s in steps), top + 1, low + 3 + high, block_size,
                seed, capture=level)


def _shuffled(blocks: list[int], in_order: bool) -> tuple[int, ...]:
    """A sequence's blocks; drawn at random they may come out increasing, which a backend that
    assumes contiguous or sorted tables would pass, so those are reversed."""
    if not in_order and len(blocks) > 1 and blocks == sorted(blocks):
        blocks = blocks[::-1]
    return tuple(blocks)


# --------------------------------------------------------------------------- the cases of a kind

LONG_PROMPT = 4096
LONG_DECODE_STEPS = 40


def kind_cases(adapter: KindAdapter, spec_cls: type, dtype: str, block_size: int, *, thorough: bool = False,
               paged: bool = True) -> list[Case]:
    """Every case of a kind for one dtype: the quick ones, and with
    ``thorough`` the long ones too. ``paged``: the backend keeps paged state,
    so the cases with other block sizes apply."""
    base = _spec(spec_cls, adapter.base, dtype)
    real = _spec(spec_cls, adapter.real, dtype) if adapter.real is not None else base
    bs = block_size
    cases = [
        plan_case("ragged_prefill", "fresh prompts of different lengths in one step", base, S.RAGGED, bs, 1),
        plan_case("decode_after_prefill", "prompts, then steps of batched decodes", base, S.DECODE_AFTER_PREFILL, bs, 2),
        plan_case("chunked_prefill", "a prompt fed in chunks beside decodes and a fresh prompt", base, S.CHUNKED, bs, 3),
        plan_case("mixed_batch", "decodes, continued prefills and fresh prompts in one step", base, S.MIXED, bs, 4),
        plan_case("long_prefill", "a long prompt over many blocks and chunks, then decodes", base, S.LONG, bs, 5),
        plan_case("isolation", "a parked sequence, and a new one reusing a finished one's slot and blocks",
                  base, S.ISOLATION, bs, 6, reuse={"e": "a"}),
        plan_case("noncontiguous", "mixed_batch with strided inputs", base, S.MIXED, bs, 7, layout=STRIDED),
        plan_case("shared_metadata", "two layers sharing each step's built metadata", base, S.MIXED, bs, 8, layers=2),
        plan_case("many_sequences", "40 sequences in one step: 33 decodes beside continued prefills and fresh "
                  "prompts", base, S.MANY, bs, 9),
        plan_case("consecutive_slots", "decodes whose slots and blocks were handed out in order", base, S.CONSECUTIVE,
                  bs, 10, in_order=True),
        plan_case("strided_pools", "consecutive_slots with each record of the pools in a larger page (padding "
                  "poisoned, and checked) and block tables padded with a real block", base, S.CONSECUTIVE, bs, 11,
                  in_order=True, pools=STRIDED),
    ]
    if paged:
        cases += [plan_case(f"block_size{n}", f"prompts and decodes over blocks of {n} tokens", base, S.BLOCKS, n,
                            10 + n) for n in (16, 7)]
    cases.append(plan_case("prefill_300", "a 300-token prompt beside short ones, continued, at real sizes", real,
                           S.PREFILL_300, bs, 30))
    cases += _sweep(adapter.shapes, base, dtype, "shape", S.SHAPE, bs, 100, "prompts, a continued prefill and decodes")
    cases += _variants(adapter.variants, base, bs, 60)
    cases += [
        plan_capture_case("capture_decode", "steps of decodes replayed from a recorded one, its metadata refilled in "
                          "place; no host sync in forward", base, S.CAPTURE_DECODE, bs, 40, UNIFORM_DECODE),
        plan_capture_case("capture_mixed", "steps of decodes and prefills replayed from a recorded one of as many "
                          "tokens and sequences; no host sync in forward", base, S.CAPTURE_MIXED, bs, 41, ANY),
    ]
    if thorough:
        cases += long_cases(adapter, base, real, dtype, bs)
    return cases


def long_cases(adapter: KindAdapter, base, real, dtype: str, bs: int) -> list[Case]:
    """The thorough mode's cases, at the kind's real sizes."""
    cases = [
        plan_case(f"prefill_{LONG_PROMPT}", f"a {LONG_PROMPT}-token prompt beside short ones, then decodes", real,
                  S.long_prefill(LONG_PROMPT), bs, 201, thorough=True),
        plan_case("long_chunked_prefill", "a 2500-token prompt in chunks of 1024 beside decodes and a fresh prompt",
                  real, S.LONG_CHUNKED, bs, 202, thorough=True),
        plan_case("long_decode", f"{LONG_DECODE_STEPS} steps of decodes after prompts of up to 1000 tokens", real,
                  S.long_decode(LONG_DECODE_STEPS), bs, 203, thorough=True),
        plan_case("many_sequences_96", "96 sequences in one step: decodes beside continued prefills and fresh prompts",
                  real, S.many_sequences(96, 64), bs, 204, thorough=True),
    ]
    shapes = _sweep(adapter.long_shapes, real, dtype, "long", S.LONG_SHAPE, bs, 300,
                    "a 700-token prompt continued by 333 tokens beside a fresh one")
    return cases + [dataclasses.replace(c, thorough=True) for c in shapes]


# The cases each variant of a kind's contract runs again: a representative few.
VARIANT_CASES = (
    ("ragged_prefill", "fresh prompts of different lengths in one step", S.RAGGED),
    ("chunked_prefill", "a prompt fed in chunks beside decodes and a fresh prompt", S.CHUNKED),
    ("decode_after_prefill", "prompts, then steps of batched decodes", S.DECODE_AFTER_PREFILL),
    ("mixed_batch", "decodes, continued prefills and fresh prompts in one step", S.MIXED),
)


def _variants(variants, base, bs: int, seed: int) -> list[Case]:
    """``VARIANT_CASES`` over ``base`` with each variant's fields, as ``<variant id>-<case>``."""
    cases = []
    for variant_id, fields in variants:
        spec = dataclasses.replace(base, **fields)
        cases += [plan_case(f"{variant_id}-{name}", f"{what}, with {_fields(fields)}", spec, steps, bs,
                            seed + len(cases)) for name, what, steps in VARIANT_CASES]
    return cases


def _spec(spec_cls: type, fields, dtype: str):
    return spec_cls(**{**fields, "dtype": dtype})


def _sweep(shapes, start, dtype: str, prefix: str, steps, bs: int, seed: int, what: str) -> list[Case]:
    """One case per shape (fields over ``start``); a shape equal to ``start`` or an earlier one runs once."""
    cases, seen = [], {start}
    for shape_id, fields in shapes:
        spec = dataclasses.replace(start, **fields)
        if getattr(spec, "state_dtype", None) == dtype:  # state in the layer's own dtype: the default
            spec = dataclasses.replace(spec, state_dtype=None)
        if spec in seen:  # e.g. state_dtype=float32 on a float32 layer
            continue
        seen.add(spec)
        cases.append(plan_case(f"{prefix}-{shape_id}", f"{what} with {_fields(fields)}", spec, steps, bs,
                               seed + 8 + len(cases)))
    return cases


def _fields(fields: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in fields.items())
