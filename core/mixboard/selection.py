"""Selection: which backend serves a layer of a given spec in an environment.

Pure: the answer depends only on (kind, spec, environment, forced backend)
and the loaded backends, so the registry memoizes it. Every candidate is
checked (API version, device, dtype, required modules, then its own
``check``); the highest priority passing one wins, ties broken by name, so
every process on every rank picks the same whatever the entry-point order.
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from typing import Any, Mapping

from .backend import ANY_DEVICE, SUPPORTED_API_VERSIONS
from .environment_facts import Environment
from .plugins import BackendEntry
from .state import StateSpec


class Candidate:
    __slots__ = ("name", "priority", "reasons")

    def __init__(self, name: str, priority: int, reasons: tuple[str, ...]):
        self.name, self.priority, self.reasons = name, priority, reasons

    @property
    def available(self) -> bool:
        return not self.reasons

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "priority": self.priority, "available": self.available, "reasons": list(self.reasons)}

    def __repr__(self) -> str:
        return f"Candidate({self.name!r}, {self.priority}, {self.reasons!r})"


class Selection:
    """The backend for layers of one (kind, spec, environment, forced backend); immutable by convention."""

    __slots__ = ("kind", "spec", "environment", "chosen", "state_spec", "candidates", "rejected", "rule", "preferred_by")

    def __init__(self, kind: str, spec: Any, environment: Environment, chosen: BackendEntry, state_spec: StateSpec,
                 candidates: tuple[Candidate, ...], rejected: Mapping[str, tuple[str, ...]], rule: str | None,
                 preferred_by: str | None = None):
        self.kind, self.spec, self.environment, self.chosen = kind, spec, environment, chosen
        self.state_spec = state_spec
        self.candidates = candidates  # best first
        self.rejected = rejected  # every other candidate -> why it was not chosen
        self.rule = rule  # the override rule that forced the choice, if any
        self.preferred_by = preferred_by  # the preference rule that picked the choice, if any

    @property
    def backend(self) -> type:
        return self.chosen.cls

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "spec": self.spec.to_dict(),
            "environment": self.environment.to_dict(),
            "chosen": self.chosen.name,
            "rule": self.rule,
            "preferred_by": self.preferred_by,
            "candidates": [c.to_dict() for c in self.candidates],
            "rejected": {name: list(reasons) for name, reasons in self.rejected.items()},
        }

    def __repr__(self) -> str:
        return f"Selection({self.kind!r} -> {self.chosen.name!r})"


@lru_cache(maxsize=None)
def module_missing(module: str) -> bool:
    """True if ``module``'s top-level package cannot be found (nothing is imported)."""
    try:
        return importlib.util.find_spec(module.partition(".")[0]) is None
    except (ImportError, ValueError):
        return True


def reasons_against(cls: type, spec: Any, env: Environment) -> tuple[str, ...]:
    """Every reason backend ``cls`` cannot serve a layer of ``spec`` in ``env``."""
    reasons: list[str] = []
    if cls.api_version not in SUPPORTED_API_VERSIONS:
        reasons.append(f"targets plugin API version {cls.api_version}; this mixboard supports "
                       f"{', '.join(map(str, SUPPORTED_API_VERSIONS))}")
    if ANY_DEVICE not in cls.devices and env.device not in cls.devices:
        reasons.append(f"runs on {', '.join(cls.devices)}; this environment is {env.device}")
    if spec.dtype not in cls.dtypes:
        reasons.append(f"supports dtypes {', '.join(cls.dtypes)}; the layer is {spec.dtype}")
    missing = [m for m in cls.requires if module_missing(m)]
    if missing:
        hint = f" ({cls.install_hint})" if cls.install_hint else ""
        if len(missing) == 1:
            reasons.append(f"needs Python module {missing[0]!r}, which is not installed{hint}")
        else:
            names = ", ".join(repr(m) for m in missing)
            reasons.append(f"needs Python modules {names}, which are not installed{hint}")
    try:
        own = cls.check(spec, env)
    except Exception as exc:  # a backend's bug must not break selection for the others
        own = [f"its check() raised {type(exc).__name__}: {exc}"]
    if not isinstance(own, (list, tuple)) or not all(isinstance(r, str) for r in own):
        own = [f"its check() returned {own!r}, not a list of reasons"]
    reasons.extend(own)
    return tuple(reasons)


def rank(entries: list[BackendEntry], spec: Any, env: Environment) -> tuple[Candidate, ...]:
    """Candidates best first: available before unavailable, then priority, then name."""
    candidates = [Candidate(e.name, e.cls.priority, reasons_against(e.cls, spec, env)) for e in entries]
    return tuple(sorted(candidates, key=lambda c: (not c.available, -c.priority, c.name)))
