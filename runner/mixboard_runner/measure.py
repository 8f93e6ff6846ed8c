"""Short, bounded timings of one backend for one (kind, spec, phase), what ``mixboard tune`` measures.

An impl is built as a runner builds it and given the kind's conformance
weights and inputs (the kit's adapters, so a plugin's kind is measured like a
built-in one); its step is timed until a budget of seconds or
``MAX_REPEATS`` runs, and the fastest run kept: on a shared machine
interference only ever slows a run down.
"""

from __future__ import annotations

import math
import time

MAX_REPEATS = 200
MIN_REPEATS = 3


class Shape:
    """What a measured step holds: prefill, ``prefill_seqs`` fresh prompts of ``prompt`` tokens;
    decode, ``batch`` sequences of one new token after ``context`` tokens each."""

    def __init__(self, prompt: int, prefill_seqs: int, batch: int, context: int):
        self.prompt, self.prefill_seqs, self.batch, self.context = prompt, prefill_seqs, batch, context

    def rows(self, phase: str) -> tuple[list[int], list[int]]:
        """(new tokens, context) per sequence."""
        if phase == "prefill":
            return [self.prompt] * self.prefill_seqs, [0] * self.prefill_seqs
        return [1] * self.batch, [self.context] * self.batch

    def to_dict(self) -> dict:
        return {"prompt": self.prompt, "prefill_seqs": self.prefill_seqs, "batch": self.batch, "context": self.context}


def sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def timed(run, device: str, budget: float) -> float:
    """The fewest seconds of ``run()``, after one warm-up, over runs until ``budget`` is spent: on a
    shared machine interference only ever slows a run down, so the fastest is the one that repeats."""
    run()
    sync(device)
    times: list[float] = []
    spent = time.perf_counter()
    while len(times) < MIN_REPEATS or (len(times) < MAX_REPEATS and time.perf_counter() - spent < budget):
        start = time.perf_counter()
        run()
        sync(device)
        times.append(time.perf_counter() - start)
    return min(times)


def measure_mixer(adapter, backend, kind, spec, env, phase: str, shape: Shape, device: str, budget: float,
                  options=None):
    """(builder seconds, forward seconds) of one step of ``phase`` on ``backend``, with its ``options``
    (an ``OptionValues``; None: its defaults)."""
    import torch

    from mixboard import CommonBatchMetadata
    from mixboard.backend import state_of
    from mixboard.dtypes import torch_dtype
    from mixboard.ops.checks import build_builder, build_impl
    from mixboard.testing.conformance.kinds import cast_weights

    dtype = torch_dtype(spec.dtype)
    gen = torch.Generator().manual_seed(0)
    state = state_of(backend, kind, spec)
    query, context = shape.rows(phase)
    block = math.lcm(16, state.block_multiple)
    tables, used = [], 0
    for q, c in zip(query, context):
        need = -(-(q + c) // block) if state.layout == "paged" else 0
        tables.append(list(range(used, used + need)))
        used += need
    count = used if state.layout == "paged" else len(query)
    pools = {name: torch.zeros((count, block, *t.shape) if state.layout == "paged" else (count, *t.shape),
                               dtype=torch_dtype(t.dtype), device=device) for name, t in state.tensors}
    tokens = sum(query)
    inputs = {name: (torch.randn((tokens, *per_token), generator=gen) * scale).to(device=device, dtype=dtype)
              for name, (per_token, scale) in adapter.inputs(spec).items()}
    weights = cast_weights(adapter.weights(spec, gen), dtype, device) if adapter.weights else None
    impl = build_impl(backend, spec, env, f"tune.{kind.name}", options)
    builder = build_builder(backend, spec, env, options)

    def common():
        return CommonBatchMetadata.build(query, context, list(range(len(query))), tables, block, device)

    made = common()  # a builder may memo on its metadata object: time it on a fresh one each run
    build_s = timed(lambda: builder(common()), device, budget / 4) - timed(common, device, budget / 8)
    meta = builder(made)
    forward_s = timed(lambda: adapter.call(impl, inputs, weights, pools, meta), device, budget)
    return max(build_s, 0.0), forward_s


def measure_op(adapter, backend, spec, env, phase: str, shape: Shape, device: str, budget: float, options=None):
    """(0, forward seconds) of one step of ``phase`` on ``backend``: every call the kind's layers get."""
    import torch

    from mixboard.dtypes import torch_dtype
    from mixboard.ops.checks import build_impl
    from mixboard.testing.conformance.kinds import cast_weights

    gen = torch.Generator().manual_seed(0)
    impl = build_impl(backend, spec, env, f"tune.{adapter.kind}", options)
    if adapter.weights is not None:
        impl.load(cast_weights(adapter.weights(spec, gen), torch_dtype(spec.dtype), device))
    rows = sum(shape.rows(phase)[0])
    calls = []
    for call in adapter.calls_of(spec):
        args = [a.to(device) if isinstance(a, torch.Tensor) else a for a in call.draw(spec, rows, gen, 0).values()]
        calls.append((getattr(impl, call.method), args))

    def step():
        for method, args in calls:
            method(*args)

    return 0.0, timed(step, device, budget)
