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
from pathlib import Path
from typing import Any, Iterable

from .errors import UsageError
from .overrides import Overrides
from .phases import DECODE, PREFILL

LOCK_VERSION = 1
DEFAULT_LOCK = "mixboard.lock"


class LockMismatch(UsageError):
    """The lock cannot be reproduced here; the message lists every difference."""


def lock_data(plan, *, model: dict, made_by: str, options: dict | None = None,
              measurements: dict | None = None) -> dict:
    """The lock of ``plan`` as plain JSON values. ``model``: what the plan is of (path, type, dtype);
    ``made_by``: the command (``mixboard lock``, ``mixboard tune``)."""
    groups: dict[tuple, dict] = {}
    backends: dict[str, dict] = {}
    for layer in plan.layers:
        for selection in (layer.selection, layer.decode_selection or layer.selection):
            entry = selection.chosen
            backends[entry.name] = {"distribution": entry.distribution, "version": entry.version}
        key = (layer.kind, layer.backend, layer.decode_backend)
        group = groups.setdefault(key, {"kind": layer.kind, PREFILL: layer.backend, DECODE: layer.decode_backend,
                                        "layers": []})
        group["layers"].append(layer.name)
    data = {
        "lock_version": LOCK_VERSION,
        "made_by": made_by,
        "model": model,
        "fingerprint": plan.fingerprint,
        "environment": plan.environment.to_dict(),
        "backends": backends,
        "options": options if options is not None else {b: dict(v) for b, v in plan.options.items()},
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
        for group in data["groups"]:
            for name in group["layers"]:
                self.choices[name] = (group["kind"], group[PREFILL], group[DECODE])
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
        """How the plan names a choice the lock forced."""
        return f"lock {Path(self.source).name}"

    def rules(self, rename=None) -> "LockedRules":
        """Overrides that force every locked layer's backends. ``rename``: the engine's layer name ->
        the lock's (an engine that names layers otherwise, vLLM's ``...self_attn.attn``)."""
        return LockedRules(self, rename)

    def differences(self, registry, env, layers: Iterable[tuple[str, str, Any]], rename=None,
                    partial: bool = False) -> list[str]:
        """What keeps the lock from being reproduced here, one line each (empty: nothing), checked
        before planning: the layers, the environment, the backends and where they came from.
        ``partial``: the engine plans only some of the lock's layers (vLLM: the mixers)."""
        out = []
        here = {(rename(n) if rename else n): kind for n, kind, _ in layers}
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
        now = env.to_dict()
        changed = [f"{k} {self.environment.get(k)!r} in the lock, {now.get(k)!r} here" for k in sorted(now)
                   if self.environment.get(k) != now.get(k)]
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
            out.append(f"the plan's fingerprint is {plan.fingerprint}, the lock's {self.fingerprint} (the layers' "
                       f"specs differ: another dtype or checkpoint?)")
        return out

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


def _few(items: list[str]) -> str:
    return ", ".join(items[:3]) + (f" and {len(items) - 3} more" if len(items) > 3 else "")


def _check_shape(data, source: str) -> None:
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
                and isinstance(group.get("layers"), list)):
            bad("a group without kind, prefill, decode and layers")
