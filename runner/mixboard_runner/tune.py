"""``mixboard tune MODEL``: measure every backend that can serve each group of
the model's layers (same kind, same spec) in each phase, on this machine,
with the model's shapes (``measure``), and pick by the measurements.

A phase's cost for a group is what one step costs it: its backend's builder
once (the kinds that keep state) plus one forward per layer. The winners go
into a lock file (``mixboard.lock``), which ``run --lock`` then reproduces.
``pick`` says how a winner is chosen.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from . import option_flags, threads
from .measure import Shape, measure_mixer, measure_op
from .table import render

# A layer split by phase must save at least this share of its best single backend's cost: a split
# builds twice the metadata and, for a dense op, may hold its weights twice, for nothing on a tie.
SPLIT_GAIN = 0.05


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


def pick(group: Group, kind, backends) -> None:
    """The winner of ``group``: the backend, or the pair (prefill, decode), that costs least.

    A choice's cost is each phase's time over that phase's best time, summed: the two phases weigh
    the same, since which one dominates depends on the workload (a prefill step of hundreds of tokens
    would otherwise drown a decode step). A pair of two backends wins over the best single backend
    only where both keep the layer's state alike (``same_records``), the kind can cut its rows by
    phase (``Kind.row_inputs``), and it saves ``SPLIT_GAIN`` of the single backend's cost.
    ``backends``: name -> backend class."""
    from mixboard.backend import state_of
    from mixboard.state import same_records

    times = group.times
    measured = [b for b in group.candidates if len(times.get(b, {})) == 2]
    if not measured:
        group.note = "nothing measured: the priority's choice"
        return
    best = {phase: min(times[b][phase] for b in measured) for phase in ("prefill", "decode")}

    def cost(prefill: str, decode: str) -> float:
        return times[prefill]["prefill"] / best["prefill"] + times[decode]["decode"] / best["decode"]

    single = min(measured, key=lambda b: (cost(b, b), b))
    group.winner = (single, single)
    fastest = (min(measured, key=lambda b: times[b]["prefill"]), min(measured, key=lambda b: times[b]["decode"]))
    if fastest[0] == fastest[1]:
        return
    if not kind.row_inputs:
        group.note = (f"{fastest[0]} is the fastest at prefill, {fastest[1]} at decode, but kind {kind.name!r} "
                      f"cannot split its rows by phase (no Kind.row_inputs)")
        return
    state = {b: state_of(backends[b], kind, group.spec) for b in measured}
    pairs = [(cost(p, d), p, d) for p in measured for d in measured if p != d and same_records(state[p], state[d])]
    if not pairs:
        group.note = f"the fastest pair ({fastest[0]}, {fastest[1]}) keeps the state two ways: one backend wins"
        return
    split_cost, prefill, decode = min(pairs)
    if split_cost > cost(single, single) * (1 - SPLIT_GAIN):
        group.note = (f"splitting it ({prefill} prefill, {decode} decode) would save under {SPLIT_GAIN:.0%}: "
                      f"one backend for both phases")
        return
    group.winner = (prefill, decode)
    if (prefill, decode) != fastest:
        group.note = f"the fastest pair ({fastest[0]}, {fastest[1]}) keeps the state two ways"
    if not state[prefill].tensors:
        group.note = ((group.note + "; ") if group.note else "") + "split: each phase's backend prepares its own weights"


def tune(model_path, dtype: str, device: str, shape: Shape, budget: float, kinds: set[str] | None,
         options=None, progress=None):
    """(registry, model, environment, groups measured) of the model at ``model_path`` (its shell:
    ``build_model``, weights not loaded).
    ``options``: {backend: {option: value}} to measure the backends with (the rest at their defaults).
    Raises UsageError before measuring anything for ``kinds`` the model has none of."""
    from mixboard import get_registry
    from mixboard.environment import for_device
    from mixboard.errors import UsageError
    from mixboard.option_rules import for_backend
    from mixboard.selection import rank
    from mixboard.testing.conformance.kinds import adapter_of
    from mixboard.testing.conformance.ops import OpAdapter

    from .loader import build_model

    env = for_device(device)
    registry = get_registry()
    model = build_model(model_path, dtype)
    groups = groups_of(registry.plan(model.layer_decls(), env, "", ""))
    present = {g.kind for g in groups}
    if kinds is not None and kinds - present:
        raise UsageError(f"--kinds names {', '.join(sorted(kinds - present))}, which this model has no layers of "
                         f"(its kinds: {', '.join(sorted(present))})")
    work, measuring = [], []
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
        measuring.append(group)
        work += [(group, adapter, b, phase) for b in available for phase in ("prefill", "decode")]
    for i, (group, adapter, name, phase) in enumerate(work):
        if progress:
            progress(i, len(work), f"{group.kind} {name} {phase}")
        if name in group.errors:
            continue
        backend = registry.backends[name].cls
        values = for_backend(backend, (options or {}).get(name)) if getattr(backend, "options", ()) else None
        try:
            if isinstance(adapter, OpAdapter):
                build_s, forward_s = measure_op(adapter, backend, group.spec, env, phase, shape, device, budget,
                                                values)
            else:
                build_s, forward_s = measure_mixer(adapter, backend, registry.kind(group.kind), group.spec, env,
                                                   phase, shape, device, budget, values)
        except Exception as exc:  # noqa: BLE001 - one backend's failure must not end the others' measurements
            group.errors[name] = f"{type(exc).__name__}: {exc}"
            continue
        group.times.setdefault(name, {})[phase] = build_s + len(group.layers) * forward_s
    if progress:
        progress(len(work), len(work), "done")
    backends = {name: entry.cls for name, entry in registry.backends.items()}
    for group in measuring:
        pick(group, registry.kind(group.kind), backends)
    return registry, model, env, groups


def add_commands(commands) -> None:
    from .run_commands import MODEL_HELP, _raw

    p = commands.add_parser(
        "tune", help="measure every eligible backend of each layer group on this machine and lock the fastest",
        description="For each group of the model's layers (same kind, same spec) and each phase (prefill, decode), "
                    "time every backend that can serve it here with the model's shapes, in short bounded runs, "
                    "print a table of times and winners, and write the winners to a lock file that `mixboard run "
                    "--lock` reproduces. A phase's time for a group is one step's: its builder once plus one "
                    "forward per layer. The winner costs least with both phases weighed the same (each phase's "
                    "time over its best); a layer gets two backends, one per phase, only where both keep its "
                    "state alike and the split saves at least 5%.",
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
    option_flags.add_flag(p)
    threads.add_flag(p)
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
    from mixboard import get_registry
    from mixboard.errors import UsageError
    from mixboard.lock import DEFAULT_LOCK, Lock, lock_data, plain_spec, write_lock
    from mixboard.option_rules import parse

    from .lock_command import model_record

    for name in ("prompt", "prefill_seqs", "batch", "context"):
        _positive(name.replace("_", "-"), getattr(args, name))
    _positive("budget", args.budget, 0.001)
    output = Path(args.output or DEFAULT_LOCK)
    if output.exists() and not args.force:
        raise UsageError(f"{output} exists: give --force to overwrite it, or -o another file")
    if not output.parent.is_dir():
        raise UsageError(f"cannot write {output}: no folder {str(output.parent)!r}")
    if not os.access(output.parent, os.W_OK) or (output.exists() and not os.access(output, os.W_OK)):
        raise UsageError(f"cannot write {output}: permission denied")  # said before minutes of measuring
    if os.environ.get("MIXBOARD_BACKEND") or os.environ.get("MIXBOARD_PREFER"):
        raise UsageError("tune measures every eligible backend: unset $MIXBOARD_BACKEND and $MIXBOARD_PREFER")
    options = parse(option_flags.given(args), get_registry().backends)
    kinds = None if args.kinds is None else {k.strip() for k in args.kinds.split(",") if k.strip()}
    shape = Shape(args.prompt, args.prefill_seqs, args.batch, args.context)
    used_threads = threads.apply(args)  # measured with the threads the run will have
    busy = os.getloadavg()[0]  # before tune's own work joins the average
    progress = _Bar() if sys.stderr.isatty() and not args.json else None
    registry, model, env, groups = tune(args.model, args.dtype, args.device, shape, args.budget, kinds, options,
                                        progress)
    chosen = [{"kind": g.kind, "prefill": g.winner[0], "decode": g.winner[1], "spec": plain_spec(g.spec),
               "layers": g.layers} for g in groups]
    pinned = Lock({"groups": chosen, "backends": {}, "environment": env.to_dict(), "fingerprint": ""}, "tune")
    running = {b for g in groups for b in g.winner}
    unused = sorted(set(options) - running)
    plan = registry.plan(model.layer_decls(), env, pinned.rules(),
                         options={b: v for b, v in options.items() if b in running})
    measured = [g.to_dict() for g in groups]
    data = lock_data(plan, model=model_record(args.model, args.dtype, model.info), made_by="mixboard tune",
                     measurements={"shape": shape.to_dict(), "budget_s": args.budget, "threads": used_threads,
                                   "groups": measured})
    try:
        write_lock(output, data)
    except OSError as exc:
        raise UsageError(f"cannot write {output}: {exc.strerror or exc}") from None
    cores = threads.cores()
    if busy > cores * 0.5:  # said once done: a mistake found on the way keeps its one line
        sys.stderr.write(f"mixboard tune: note: the machine was busy (load {busy:.1f} on {cores} cores): "
                         f"the times are noisy; tune on a quiet machine for choices that hold\n")
    if args.json:
        print(json.dumps({"path": str(output), "fingerprint": plan.fingerprint, "shape": shape.to_dict(),
                          "threads": used_threads, "groups": measured, "options_unused": unused}, indent=2))
        return 0
    print(f"measured on {env} with {used_threads} thread{'s' if used_threads > 1 else ''}: "
          f"prefill {shape.prefill_seqs} x {shape.prompt} tokens, decode {shape.batch} "
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
    if unused:
        print(f"\n(the options given to {', '.join(unused)} are not in the lock: no layer runs "
              f"{'it' if len(unused) == 1 else 'them'} by the lock)")
    changed = sum(1 for g in groups if g.winner != g.priority)
    print(f"\n* the winner. {changed} of {len(groups)} groups differ from the priority's choice; wrote {output} "
          f"(fingerprint {plan.fingerprint}): run with it: mixboard run {args.model} --lock {output}")
    return 0


class _Bar:
    """One line on stderr: measurements done of all."""

    def __call__(self, done: int, total: int, what: str) -> None:
        frac = done / max(1, total)
        sys.stderr.write(f"\r[{'#' * int(30 * frac):<30}] {done}/{total} {what:<40.40}")
        if done == total:
            sys.stderr.write("\n")
        sys.stderr.flush()
