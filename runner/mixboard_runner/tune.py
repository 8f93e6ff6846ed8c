"""``mixboard tune MODEL``: measure every backend that can serve each group of
the model's layers (same kind, same spec) in each phase, on this machine,
with the model's shapes, and pick by the measurements.

Each measurement is short and bounded: an impl is built as a runner builds
it, given the kind's conformance weights and inputs (the kit's adapters, so
a plugin's kind is measured like a built-in one), then its step is timed
until ``budget`` seconds or ``MAX_REPEATS`` runs, and the fastest kept. A
phase's cost for a group is what one step costs it: its backend's builder
once (the kinds that keep state) plus one forward per layer. The winners go
into a lock file (``mixboard.lock``), which ``run --lock`` then reproduces.
A layer's two phases must share a state layout, so where the fastest
prefill and decode backends keep it differently, the pair of one layout
that costs least (each phase's time over its best) wins.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

from .table import render

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


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _timed(run, device: str, budget: float) -> float:
    """The fewest seconds of ``run()``, after one warm-up, over runs until ``budget`` is spent: on a
    shared machine interference only ever slows a run down, so the fastest is the one that repeats."""
    run()
    _sync(device)
    times: list[float] = []
    spent = time.perf_counter()
    while len(times) < MIN_REPEATS or (len(times) < MAX_REPEATS and time.perf_counter() - spent < budget):
        start = time.perf_counter()
        run()
        _sync(device)
        times.append(time.perf_counter() - start)
    return min(times)


def measure_mixer(adapter, backend, kind, spec, env, phase: str, shape: Shape, device: str, budget: float):
    """(builder seconds, forward seconds) of one step of ``phase`` on ``backend``."""
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
    impl = build_impl(backend, spec, env, f"tune.{kind.name}")
    builder = build_builder(backend, spec, env)  # a backend's options at their defaults, as build_impl's

    def common():
        return CommonBatchMetadata.build(query, context, list(range(len(query))), tables, block, device)

    made = common()  # a builder may memo on its metadata object: time it on a fresh one each run
    build_s = _timed(lambda: builder(common()), device, budget / 4) - _timed(common, device, budget / 8)
    meta = builder(made)
    forward_s = _timed(lambda: adapter.call(impl, inputs, weights, pools, meta), device, budget)
    return max(build_s, 0.0), forward_s


def measure_op(adapter, backend, spec, env, phase: str, shape: Shape, device: str, budget: float):
    """(0, forward seconds) of one step of ``phase`` on ``backend``: every call the kind's layers get."""
    import torch

    from mixboard.dtypes import torch_dtype
    from mixboard.ops.checks import build_impl
    from mixboard.testing.conformance.kinds import cast_weights

    gen = torch.Generator().manual_seed(0)
    impl = build_impl(backend, spec, env, f"tune.{adapter.kind}")
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

    return 0.0, _timed(step, device, budget)


class Group:
    """Layers of one kind and spec, and what each backend measured for them."""

    def __init__(self, kind: str, spec, layers: list[str], priority: tuple[str, str]):
        self.kind, self.spec, self.layers, self.priority = kind, spec, layers, priority
        self.candidates: list[str] = []
        self.times: dict[str, dict[str, float]] = {}  # backend -> phase -> seconds a step
        self.errors: dict[str, str] = {}
        self.winner: tuple[str, str] = priority
        self.note = ""

    def to_dict(self) -> dict:
        return {"kind": self.kind, "spec": self.spec.to_dict(), "layers": len(self.layers),
                "first_layer": self.layers[0], "prefill": self.winner[0], "decode": self.winner[1],
                "by_priority": {"prefill": self.priority[0], "decode": self.priority[1]}, "note": self.note,
                "measured": [{"backend": b, "prefill_ms": self.times.get(b, {}).get("prefill", None) and
                              self.times[b]["prefill"] * 1e3,
                              "decode_ms": self.times.get(b, {}).get("decode", None) and self.times[b]["decode"] * 1e3,
                              "error": self.errors.get(b)} for b in self.candidates]}


def groups_of(plan) -> list[Group]:
    found: dict[tuple, Group] = {}
    for layer in plan.layers:
        key = (layer.kind, layer.spec)
        if key not in found:
            found[key] = Group(layer.kind, layer.spec, [], (layer.backend, layer.decode_backend))
        found[key].layers.append(layer.name)
    return list(found.values())


def pick(group: Group, registry, env) -> None:
    """The pair of one state layout that costs least, each phase's time over its best."""
    from mixboard.backend import state_of

    kind = registry.kind(group.kind)
    measured = [b for b in group.candidates if b in group.times and len(group.times[b]) == 2]
    if not measured:
        group.note = "nothing measured: the priority's choice"
        return
    best = {phase: min(group.times[b][phase] for b in measured) for phase in ("prefill", "decode")}
    layout = {b: state_of(registry.backends[b].cls, kind, group.spec) for b in measured}
    pairs = [(group.times[p]["prefill"] / best["prefill"] + group.times[d]["decode"] / best["decode"], p, d)
             for p in measured for d in measured if layout[p] == layout[d]]
    _, prefill, decode = min(pairs)
    group.winner = (prefill, decode)
    fastest = (min(measured, key=lambda b: group.times[b]["prefill"]), min(measured, key=lambda b: group.times[b]["decode"]))
    if fastest != group.winner:
        group.note = (f"the fastest pair ({fastest[0]}, {fastest[1]}) keeps two state layouts; the best pair of one "
                      f"layout wins")


def tune(model_path, dtype: str, device: str, shape: Shape, budget: float, kinds: set[str] | None, progress=None):
    """(plan by priority, groups measured, environment) for the model at ``model_path``."""
    from mixboard import get_registry
    from mixboard.environment import for_device
    from mixboard.selection import rank
    from mixboard.testing.conformance.kinds import adapter_of
    from mixboard.testing.conformance.ops import OpAdapter

    from .loader import build_model

    env = for_device(device)
    registry = get_registry()
    decls = build_model(model_path, dtype).layer_decls()
    plan = registry.plan(decls, env, "", "")
    groups = groups_of(plan)
    work = []
    for group in groups:
        if kinds is not None and group.kind not in kinds:
            group.note = "not measured (--kinds)"
            continue
        available = [c.name for c in rank(registry.backends_of(group.kind), group.spec, env) if c.available]
        group.candidates = available
        if len(available) < 2:
            group.note = "the only backend that can serve it"
            continue
        adapter = adapter_of(registry.kind(group.kind))
        if adapter is None:
            group.note = "its kind has no conformance adapter to measure with: the priority's choice"
            continue
        work += [(group, adapter, b, phase) for b in available for phase in ("prefill", "decode")]
    for i, (group, adapter, name, phase) in enumerate(work):
        if progress:
            progress(i, len(work), f"{group.kind} {name} {phase}")
        if name in group.errors:
            continue
        backend = registry.backends[name].cls
        try:
            if isinstance(adapter, OpAdapter):
                build_s, forward_s = measure_op(adapter, backend, group.spec, env, phase, shape, device, budget)
            else:
                build_s, forward_s = measure_mixer(adapter, backend, registry.kind(group.kind), group.spec, env,
                                                   phase, shape, device, budget)
        except Exception as exc:  # noqa: BLE001 - one backend's failure must not end the others' measurements
            group.errors[name] = f"{type(exc).__name__}: {exc}"
            continue
        group.times.setdefault(name, {})[phase] = build_s + len(group.layers) * forward_s
    if progress:
        progress(len(work), len(work), "done")
    for group in groups:
        if group.candidates and len(group.candidates) > 1:
            pick(group, registry, env)
    return registry, decls, env, groups


def add_commands(commands) -> None:
    from .run_commands import MODEL_HELP, _raw

    p = commands.add_parser(
        "tune", help="measure every eligible backend of each layer group on this machine and lock the fastest",
        description="For each group of the model's layers (same kind, same spec) and each phase (prefill, decode), "
                    "time every backend that can serve it here with the model's shapes, in short bounded runs, "
                    "print a table of times and winners, and write the winners to a lock file that `mixboard run "
                    "--lock` reproduces. A phase's time for a group is one step's: its builder once plus one "
                    "forward per layer. Both phases of a layer must keep one state layout.",
        epilog="examples:\n  mixboard tune ./my-hybrid                       measure, print, write mixboard.lock\n"
               "  mixboard tune ./my-hybrid --kinds attention,mamba2 --batch 64 -o decode64.lock\n"
               "  mixboard run ./my-hybrid --lock mixboard.lock   run with the measured choices",
        formatter_class=_raw())
    p.add_argument("model", nargs="?", default="demo", metavar="MODEL", help=MODEL_HELP)
    p.add_argument("--device", default="cpu", help="the torch device to measure on (default cpu)")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    p.add_argument("--kinds", default=None, metavar="K1,K2",
                   help="measure only these kinds (the others keep the priority's choice)")
    p.add_argument("--prompt", type=int, default=512, metavar="N", help="prefill: tokens of each prompt (default 512)")
    p.add_argument("--prefill-seqs", type=int, default=1, metavar="N", help="prefill: prompts in the step (default 1)")
    p.add_argument("--batch", type=int, default=16, metavar="N", help="decode: sequences in the step (default 16)")
    p.add_argument("--context", type=int, default=512, metavar="N",
                   help="decode: tokens each sequence holds already (default 512)")
    p.add_argument("--budget", type=float, default=0.2, metavar="S",
                   help="seconds of timed runs per backend and phase, at least 3 runs each (default 0.2)")
    p.add_argument("-o", "--output", default=None, metavar="FILE", help="the lock to write (default: mixboard.lock)")
    p.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    p.add_argument("--json", action="store_true", help="print the measurements as JSON (stable contract)")
    p.set_defaults(run=cmd_tune)


def _positive(name: str, value, low: float = 1):
    from mixboard.errors import UsageError

    if value < low:
        raise UsageError(f"--{name} must be at least {low}, not {value}")
    return value


def cmd_tune(args) -> int:
    from mixboard.errors import UsageError
    from mixboard.lock import DEFAULT_LOCK, Lock, lock_data, write_lock

    from .locking import model_record

    for name in ("prompt", "prefill_seqs", "batch", "context"):
        _positive(name.replace("_", "-"), getattr(args, name))
    _positive("budget", args.budget, 0.001)
    output = Path(args.output or DEFAULT_LOCK)
    if output.exists() and not args.force:
        raise UsageError(f"{output} exists: give --force to overwrite it, or -o another file")
    if os.environ.get("MIXBOARD_BACKEND") or os.environ.get("MIXBOARD_PREFER"):
        raise UsageError("tune measures every eligible backend: unset $MIXBOARD_BACKEND and $MIXBOARD_PREFER")
    kinds = None if args.kinds is None else {k.strip() for k in args.kinds.split(",") if k.strip()}
    shape = Shape(args.prompt, args.prefill_seqs, args.batch, args.context)
    busy = os.getloadavg()[0]
    if busy > (os.cpu_count() or 1) * 0.5:  # measurements share the cores with whatever else runs
        sys.stderr.write(f"mixboard tune: note: the machine is busy (load {busy:.1f} on {os.cpu_count()} cores): "
                         f"the times will be noisy; tune on a quiet machine for choices that hold\n")
    progress = _Bar() if sys.stderr.isatty() and not args.json else None
    registry, decls, env, groups = tune(args.model, args.dtype, args.device, shape, args.budget, kinds, progress)
    if kinds is not None:
        unknown = kinds - {g.kind for g in groups}
        if unknown:
            raise UsageError(f"--kinds names {', '.join(sorted(unknown))}, which this model has no layers of "
                             f"(its kinds: {', '.join(sorted({g.kind for g in groups}))})")
    chosen = [{"kind": g.kind, "prefill": g.winner[0], "decode": g.winner[1], "layers": g.layers} for g in groups]
    pinned = Lock({"groups": chosen, "backends": {}, "environment": env.to_dict(), "fingerprint": ""}, "tune")
    plan = registry.plan(decls, env, pinned.rules())
    measured = [g.to_dict() for g in groups]
    data = lock_data(plan, model=model_record(args.model, args.dtype, _info(args)), made_by="mixboard tune",
                     measurements={"shape": shape.to_dict(), "budget_s": args.budget, "groups": measured})
    write_lock(output, data)
    if args.json:
        print(json.dumps({"path": str(output), "fingerprint": plan.fingerprint, "shape": shape.to_dict(),
                          "groups": measured}, indent=2))
        return 0
    print(f"measured on {env}: prefill {shape.prefill_seqs} x {shape.prompt} tokens, decode {shape.batch} "
          f"sequences after {shape.context} tokens; ms per step of each group (its builder + one forward a layer)")
    rows = []
    for g in groups:
        for i, b in enumerate(g.candidates or [g.winner[0]]):
            t = g.times.get(b, {})
            cells = [(f"{t[phase] * 1e3:.3f}" if phase in t else "-") + (" *" if g.winner[j] == b else "")
                     for j, phase in enumerate(("prefill", "decode"))]
            note = g.errors.get(b) or (g.note if i == 0 else "")
            rows.append([g.kind if i == 0 else "", f"{len(g.layers)}" if i == 0 else "",
                         g.layers[0] if i == 0 else "", b, *cells, note])
    print(render(["kind", "layers", "first layer", "backend", "prefill ms", "decode ms", "note"], rows))
    changed = sum(1 for g in groups if g.winner != g.priority)
    print(f"\n* the winner. {changed} of {len(groups)} groups differ from the priority's choice; wrote {output} "
          f"(fingerprint {plan.fingerprint}): run with it: mixboard run {args.model} --lock {output}")
    return 0


def _info(args):
    from .loader import build_model

    return build_model(args.model, args.dtype).info


class _Bar:
    """One line on stderr: measurements done of all."""

    def __call__(self, done: int, total: int, what: str) -> None:
        frac = done / max(1, total)
        sys.stderr.write(f"\r[{'#' * int(30 * frac):<30}] {done}/{total} {what:<40.40}")
        if done == total:
            sys.stderr.write("\n")
        sys.stderr.flush()
