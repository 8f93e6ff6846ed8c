"""A lock file (``mixboard.lock``): a plan written down, to be reproduced
exactly on another run or another machine, or refused saying what differs.

It records, per group of layers, the backend of each phase (the layers
named one by one), the distribution and version every chosen backend came
from, the environment, the backend options and the plan's fingerprint;
``mixboard tune`` adds what it measured. Reading one back
(``Lock.rules()``) forces every layer's backends as written; ``differences``
lists what keeps it from being reproduced here (a backend not installed,
another version of a plugin, another device) before anything is planned,
and ``check_plan`` compares the plan made with it. JSON, so any tool can
read it; keys are sorted so that two locks of one plan are the same bytes.
"""

from __future__ import annotations

import json
import math
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable

from .errors import UsageError
from .overrides import Overrides
from .phases import DECODE, PREFILL

LOCK_VERSION = 2  # 2: groups carry their layers' spec
DEFAULT_LOCK = "mixboard.lock"


class LockMismatch(UsageError):
    """The lock cannot be reproduced here; the message lists every difference."""


def plain_spec(spec) -> dict:
    """A layer's spec as the lock writes it (JSON's values: lists, not tuples), to compare with one read back."""
    return json.loads(json.dumps(spec.to_dict()))


def lock_data(plan, *, model: dict, made_by: str, measurements: dict | None = None) -> dict:
    """The lock of ``plan`` as plain JSON values, groups of layers of one kind, spec and backend per phase.
    ``model``: what the plan is of (path, type, dtype); ``made_by``: the command (``mixboard lock``,
    ``mixboard tune``)."""
    groups: dict[tuple, dict] = {}
    backends: dict[str, dict] = {}
    for layer in plan.layers:
        for selection in (layer.selection, layer.decode_selection or layer.selection):
            entry = selection.chosen
            backends[entry.name] = {"distribution": entry.distribution, "version": entry.version}
        spec = plain_spec(layer.spec)
        key = (layer.kind, layer.backend, layer.decode_backend, json.dumps(spec, sort_keys=True))
        group = groups.setdefault(key, {"kind": layer.kind, PREFILL: layer.backend, DECODE: layer.decode_backend,
                                        "spec": spec, "layers": []})
        group["layers"].append(layer.name)
    data = {
        "lock_version": LOCK_VERSION,
        "made_by": made_by,
        "model": model,
        "fingerprint": plan.fingerprint,
        "environment": plan.environment.to_dict(),
        "backends": backends,
        "options": {b: dict(v) for b, v in plan.options.items()},
        "groups": list(groups.values()),
    }
    if measurements is not None:
        data["measurements"] = measurements
    return data


def write_lock(path: str | Path, data: dict) -> None:
    Path(path).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


class Lock:
    """A lock file read back. ``choices``: layer -> (kind, prefill backend, decode backend)."""

    def __init__(self, data: dict, source: str = "<lock>"):
        self.data, self.source = data, source
        self.choices: dict[str, tuple[str, str, str]] = {}
        self.specs: dict[str, dict] = {}  # layer -> its spec when the lock was written
        for group in data["groups"]:
            for name in group["layers"]:
                self.choices[name] = (group["kind"], group[PREFILL], group[DECODE])
                self.specs[name] = group["spec"]
        self.backends: dict[str, dict] = data["backends"]
        self.environment: dict = data["environment"]
        self.fingerprint: str = data["fingerprint"]
        self.options: dict = data.get("options") or {}

    @classmethod
    def read(cls, path: str | Path) -> "Lock":
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as exc:
            raise UsageError(f"cannot read lock file {str(path)!r}: {exc.strerror or exc}") from None
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise UsageError(f"{path}: not a mixboard lock (not JSON: {exc})") from None
        _check_shape(data, str(path))
        return cls(data, str(path))

    @property
    def rule(self) -> str:
        """How the plan names a choice the lock forced (the registry's advice for a forced backend that
        cannot serve knows this ``lock `` prefix)."""
        return f"lock {Path(self.source).name}"

    def rules(self, rename=None) -> "LockedRules":
        """Overrides that force every locked layer's backends. ``rename``: the engine's layer name ->
        the lock's (an engine that names layers otherwise, vLLM's ``...self_attn.attn``)."""
        return LockedRules(self, rename)

    def differences(self, registry, env, layers: Iterable[tuple[str, str, Any]], rename=None,
                    partial: bool = False, model_type: str | None = None) -> list[str]:
        """What keeps the lock from being reproduced here, one line each (empty: nothing), checked
        before planning: the model, its layers and their specs (dtype among them), the environment,
        the backends and where they came from. ``partial``: the engine plans only some of the lock's
        layers (vLLM: the mixers). ``model_type``: the checkpoint's, where the engine knows it."""
        out = []
        layers = [((rename(n) if rename else n), kind, spec) for n, kind, spec in layers]
        here = {n: kind for n, kind, _ in layers}
        locked_type = (self.data.get("model") or {}).get("model_type")
        if model_type and locked_type and model_type != locked_type:
            out.append(f"the model is a {model_type!r} checkpoint here, a {locked_type!r} one in the lock")
        missing = [n for n in here if n not in self.choices]
        if missing:
            out.append(f"layers not in the lock: {_few(missing)} (a lock of another model?)")
        extra = [n for n in self.choices if n not in here and not partial]
        if extra:
            out.append(f"locked layers this model does not have: {_few(extra)}")
        wrong = [f"{n} is {k} here, {self.choices[n][0]} in the lock" for n, k in here.items()
                 if n in self.choices and self.choices[n][0] != k]
        if wrong:
            out.append("layer kinds differ: " + _few(wrong))
        out += _spec_differences([(n, spec, self.specs[n]) for n, kind, spec in layers
                                  if n in self.choices and self.choices[n][0] == kind])
        now = env.to_dict()
        # every key either side has: a lock that records what this mixboard does not is a difference too
        changed = [f"{k} {self.environment.get(k)!r} in the lock, {now.get(k)!r} here"
                   for k in sorted({*now, *self.environment}) if self.environment.get(k) != now.get(k)]
        if changed:
            out.append("the environment differs: " + "; ".join(changed))
        used = {b for n, (_, p, d) in self.choices.items() if n in here for b in (p, d)}
        moved: dict[tuple, list[str]] = {}  # (lock's distribution and version, here's) -> backends
        for name in sorted(used):
            want = self.backends.get(name, {})
            entry = registry.backends.get(name)
            source = f"{want.get('distribution')} {want.get('version')}"
            if entry is None:
                out.append(f"backend {name!r} is not installed (the lock's came from {source})")
            elif (entry.distribution, entry.version) != (want.get("distribution"), want.get("version")):
                moved.setdefault((source, f"{entry.distribution} {entry.version}"), []).append(name)
        for (locked, installed), names in moved.items():
            out.append(f"{locked} in the lock, {installed} here ({_few(names)})")
        return out

    def options_for(self, layers: Iterable[tuple[str, str, Any]], rename=None) -> dict:
        """The lock's options of the backends it runs ``layers`` on (an engine that plans only some of
        the lock's layers, vLLM, gets only theirs: an option for a backend no layer runs is an error)."""
        used = {b for n, _, _ in layers for b in self.choices.get(rename(n) if rename else n, (None,))[1:]}
        return {b: v for b, v in self.options.items() if b in used}

    def check_plan(self, plan, options: dict | None = None, fingerprint: bool = True, partial: bool = False
                   ) -> list[str]:
        """What differs between the plan made with the lock and the lock (empty: nothing). The plan's
        options (every option of the backends it runs, defaults filled in) must be the lock's: a
        backend that declares other options than when the lock was written is named here.
        ``partial``: the plan is of some of the lock's layers (vLLM), held to their backends' options."""
        out = []
        here = options if options is not None else {b: dict(v) for b, v in plan.options.items()}
        want = {b: v for b, v in self.options.items() if b in here} if partial else self.options
        if here != want:
            out.append(f"backend options differ: {want or 'none'} in the lock, {here or 'none'} here")
        if fingerprint and plan.fingerprint != self.fingerprint:
            out.append(f"the plan's fingerprint is {plan.fingerprint}, the lock's {self.fingerprint} (a lock edited "
                       f"by hand, or written by another version of mixboard?)")
        return out

    @contextmanager
    def blamed(self):
        """Planning with the lock's rules and options: a usage error there is the lock's (an option
        value edited out of range, a backend that cannot serve), and says so."""
        try:
            yield
        except LockMismatch:
            raise
        except UsageError as exc:
            raise LockMismatch(f"lock {self.source}: {exc}") from None

    def refuse(self, problems: list[str]) -> None:
        if problems:
            raise LockMismatch(f"lock {self.source} cannot be reproduced here:\n" + "\n".join(f"  {p}" for p in problems))


class LockedRules(Overrides):
    """Forcing rules read from a lock: each layer's backend per phase, looked up by exact name."""

    __slots__ = ("lock", "rename", "_split")

    def __init__(self, lock: Lock, rename=None):
        super().__init__()
        self.lock, self.rename = lock, rename
        self._split = any(p != d for _, p, d in lock.choices.values())

    def __bool__(self) -> bool:
        return True

    @property
    def has_phases(self) -> bool:
        return self._split

    def for_layer(self, layer, kind, phase=None):
        found = self.lock.choices.get(self.rename(layer) if self.rename and layer else layer)
        if found is None:
            return None
        return (found[2] if phase == DECODE else found[1]), self.lock.rule

    def all_for_layer(self, layer, kind, phase=None):
        return ()

    def __str__(self) -> str:
        return self.lock.rule


def _spec_differences(layers: list[tuple[str, Any, dict]]) -> list[str]:
    """One line per way the layers' specs differ from the lock's (``dtype 'float32' in the lock,
    'bfloat16' here``), naming the layers it applies to."""
    found: dict[str, list[str]] = {}
    for name, spec, locked in layers:
        written = plain_spec(spec)
        if written == locked:
            continue
        there = _canonical(spec, locked)
        here = written if there is locked else _canonical(spec, spec.to_dict())
        differ = [f for f in sorted({*here, *there}) if not _same_value(here.get(f), there.get(f))]
        # a field written alike that differs only through another one (mamba2's norm_eps where gated_norm
        # differs) is not named: the other one is
        differ = [f for f in differ if not _same_value(written.get(f), locked.get(f))] or differ
        fields = [f"{f} {locked.get(f)!r} in the lock, {spec.to_dict().get(f)!r} here" for f in differ]
        if fields:
            found.setdefault("; ".join(fields), []).append(name)
    return [f"layer specs differ ({_few(names)}): {what}" for what, names in found.items()]


def _canonical(spec, values: dict) -> dict:
    """``values`` (a spec's fields) as ``spec``'s kind fills in their defaults; as they are where they do
    not make a spec of its class (a lock of another mixboard version)."""
    # to_dict writes a float's infinity as "inf" (JSON has none; mamba2's dt_max): read back as the float
    fields = {k: math.inf if v == "inf" and isinstance(getattr(spec, k, None), float) else v for k, v in values.items()}
    try:
        return json.loads(json.dumps(type(spec)(**fields).canonical()))
    except (TypeError, ValueError):
        return values


def _same_value(a, b) -> bool:
    # a float derived by two engines may differ in its last bit (1/sqrt(32) two ways)
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9)
    return a == b


def _few(items: list[str]) -> str:
    return ", ".join(items[:3]) + (f" and {len(items) - 3} more" if len(items) > 3 else "")


def _check_shape(data, source: str) -> None:
    """Refuse, in one line, a file that is not a lock this mixboard wrote (or one edited out of shape)."""
    def bad(what: str):
        raise UsageError(f"{source}: not a mixboard lock ({what})")

    if not isinstance(data, dict) or "lock_version" not in data:
        bad("no lock_version")
    if data["lock_version"] != LOCK_VERSION:
        raise UsageError(f"{source}: lock format {data['lock_version']!r}; this mixboard reads format {LOCK_VERSION} "
                         f"(write it again with `mixboard lock`)")
    for key, kind in (("groups", list), ("backends", dict), ("environment", dict), ("fingerprint", str)):
        if not isinstance(data.get(key), kind):
            bad(f"{key!r} missing or not a {kind.__name__}")
    for group in data["groups"]:
        if not (isinstance(group, dict) and all(isinstance(group.get(k), str) for k in ("kind", PREFILL, DECODE))
                and isinstance(group.get("spec"), dict) and isinstance(group.get("layers"), list)
                and all(isinstance(n, str) for n in group["layers"])):
            bad("a group without kind, prefill, decode, spec and a list of layer names")
    seen: set[str] = set()
    for group in data["groups"]:
        for name in group["layers"]:
            if name in seen:
                bad(f"layer {name!r} listed twice")
            seen.add(name)
    for name, source_of in data["backends"].items():
        if not (isinstance(source_of, dict) and all(isinstance(source_of.get(k), str)
                                                    for k in ("distribution", "version"))):
            bad(f"backend {name!r} without the distribution and version it came from")
    used = {g[p] for g in data["groups"] for p in (PREFILL, DECODE)}
    if used - set(data["backends"]):
        bad(f"no distribution recorded for backend(s) {', '.join(sorted(used - set(data['backends'])))}")
    options = data.get("options", {})
    if not (isinstance(options, dict) and all(isinstance(v, dict) for v in options.values())):
        bad("'options' not a mapping of backend to its option values")
    if not isinstance(data.get("model", {}), dict):
        bad("'model' not a mapping")
