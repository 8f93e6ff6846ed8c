"""Helpers shared by test_attention_sdpa.py and test_attention_flash.py (no tests here).

A *schedule* runs whole sequences through an attention impl step by step,
the way a runner would: a paged cache whose blocks are handed out in a
shuffled order (and start full of garbage, so a read of an unwritten slot
shows), continuous batching with decodes first, prefills split in chunks.
Outputs are collected per sequence, so any schedule can be compared with
one prefill of each sequence, or with a transformers module run on it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from mixboard import CommonBatchMetadata, simulate
from mixboard.kinds.attention import attention_state
from mixboard.ops.checks import build_impl
from mixboard.testing import allocate_state

CPU = simulate("cpu")
LAYER = "model.layers.5.self_attn"


@dataclass
class Seqs:
    """Per-sequence q [L, H, D], k and v [L, Hkv, D] of a whole sequence."""

    q: list[torch.Tensor]
    k: list[torch.Tensor]
    v: list[torch.Tensor]

    @property
    def lengths(self) -> list[int]:
        return [t.shape[0] for t in self.q]


def random_seqs(spec, lengths, seed=0, dtype=None) -> Seqs:
    g = torch.Generator().manual_seed(seed)
    dtype = dtype or getattr(torch, spec.dtype)
    H, KVH, D = spec.num_heads, spec.num_kv_heads, spec.head_size

    def make(n, heads):
        return (torch.randn(n, heads, D, generator=g)).to(dtype)

    return Seqs([make(n, H) for n in lengths], [make(n, KVH) for n in lengths], [make(n, KVH) for n in lengths])


def one_prefill_schedule(lengths) -> list[list[tuple[int, int]]]:
    """Every sequence as one prefill, all in one step."""
    return [[(i, n) for i, n in enumerate(lengths)]]


def random_schedule(lengths, seed, max_batch=8, max_chunk=None) -> list[list[tuple[int, int]]]:
    """Steps of (sequence, new tokens): chunked prefills and decodes mixed, at
    most ``max_batch`` sequences a step, each sequence at most once a step."""
    rng = random.Random(seed)
    done = [0] * len(lengths)
    steps = []
    while any(d < n for d, n in zip(done, lengths)):
        active = [i for i, (d, n) in enumerate(zip(done, lengths)) if d < n]
        rng.shuffle(active)
        step = []
        for i in active[: rng.randint(1, max_batch)]:
            left = lengths[i] - done[i]
            if done[i] and rng.random() < 0.6:
                take = 1  # a decode
            else:
                take = rng.randint(1, min(left, max_chunk or left))
            step.append((i, take))
            done[i] += take
        steps.append(step)
    return steps


def decode_schedule(lengths, prompts) -> list[list[tuple[int, int]]]:
    """One prefill of each sequence's prompt (a number, or one per sequence),
    then decode steps of every unfinished sequence until all are done."""
    if isinstance(prompts, int):
        prompts = [prompts] * len(lengths)
    done = [min(p, n) for p, n in zip(prompts, lengths)]
    steps = [[(i, d) for i, d in enumerate(done)]]
    while any(d < n for d, n in zip(done, lengths)):
        steps.append([(i, 1) for i, (d, n) in enumerate(zip(done, lengths)) if d < n])
        done = [min(d + 1, n) for d, n in zip(done, lengths)]
    return steps


def make_impl(backend, spec):
    return build_impl(backend, spec, CPU, LAYER)


def run_schedule(backend, spec, seqs: Seqs, schedule, block_size=4, seed=0, impl=None, use_builder=True):
    """Run ``schedule`` through ``backend``; returns (per-sequence outputs, final state, metas seen)."""
    rng = random.Random(seed)
    lengths = seqs.lengths
    need = [-(-n // block_size) for n in lengths]
    num_blocks = sum(need) + 3
    ids = list(range(num_blocks))
    rng.shuffle(ids)
    tables, at = [], 0
    for n in need:
        tables.append(ids[at: at + n])
        at += n
    state = allocate_state(attention_state(spec), num_blocks, block_size)
    g = torch.Generator().manual_seed(seed + 1)
    for pool in state.values():  # garbage where nothing was written
        pool.copy_(torch.randn(pool.shape, generator=g) * 100)
    impl = impl or make_impl(backend, spec)
    build = backend.builder(spec, CPU) if use_builder else (lambda common: common)
    out = [torch.full_like(q, float("nan")) for q in seqs.q]
    done = [0] * len(lengths)
    metas = []
    for step in schedule:
        # decodes (one token after earlier context) first, as the metadata requires
        step = sorted(step, key=lambda e: not (e[1] == 1 and done[e[0]] > 0))
        common = CommonBatchMetadata.build(
            [n for _, n in step], [done[i] for i, _ in step], [i for i, _ in step],
            [tables[i] for i, _ in step], block_size)
        q = torch.cat([seqs.q[i][done[i]: done[i] + n] for i, n in step])
        k = torch.cat([seqs.k[i][done[i]: done[i] + n] for i, n in step])
        v = torch.cat([seqs.v[i][done[i]: done[i] + n] for i, n in step])
        meta = build(common)
        metas.append(meta)
        res = impl.forward(q, k, v, state, meta)
        at = 0
        for i, n in step:
            out[i][done[i]: done[i] + n] = res[at: at + n]
            at += n
            done[i] += n
    return out, state, metas


def max_error(outs, refs) -> float:
    return max(float((o.double() - r.double()).abs().max()) for o, r in zip(outs, refs))
