"""Backend overrides: ``attention=sdpa,mamba2=mamba2_torch,model.layers.3.*=sdpa``.

A target without a dot or glob character names a kind; one with either is a
layer-name pattern (``fnmatch`` syntax). For a layer, the first layer pattern
that matches wins, then the rule for its kind. A layer pattern picks only
layers of the kind its backend serves: ``model.layers.3.*=sdpa`` forces the
attention of block 3 and leaves its norms and projections (layers of other
kinds, named under the same block) to their own rules. Overrides are strict:
the named backend must serve the layer or selection fails.

A target may name a phase: ``attention@decode=sdpa`` picks the backend
of attention layers' decode rows only, ``model.layers.3.*@prefill=sdpa``
that of block 3's prefill rows (``mixboard.phases``). For a layer and a
phase, layer patterns still come before kind rules; within each, a rule for
the phase comes before a rule for both.

Preferences (``--prefer``, ``$MIXBOARD_PREFER``) use the same rules without
the strictness: a preferred backend that can serve a layer wins whatever its
priority; one that cannot is passed over, with its reasons in the plan. A
target may be named more than once there, the backends tried in the order
written.
"""

from __future__ import annotations

import re
from fnmatch import translate

from .errors import UsageError
from .phases import PHASES

_GLOB = re.compile(r"[.*?\[]")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Rule:
    """One rule as written: ``target`` (a kind or a layer pattern), the backend, the phase it is
    limited to (None: both), and ``text``, the rule as messages quote it."""

    __slots__ = ("target", "backend", "phase", "text")

    def __init__(self, target: str, backend: str, phase: str | None = None):
        self.target, self.backend, self.phase = target, backend, phase
        self.text = f"{target}{'@' + phase if phase else ''}={backend}"

    def __eq__(self, other) -> bool:
        return isinstance(other, Rule) and (self.target, self.backend, self.phase) == (
            other.target, other.backend, other.phase)

    def __hash__(self) -> int:
        return hash((self.target, self.backend, self.phase))

    def __repr__(self) -> str:
        return f"Rule({self.text!r})"


class Overrides:
    __slots__ = ("kind_rules", "layer_rules", "backend_kinds", "_patterns", "_phased")

    def __init__(self, kind_rules: tuple[Rule, ...] = (), layer_rules: tuple[Rule, ...] = (),
                 backend_kinds: dict[str, str] | None = None):
        self.kind_rules = tuple(kind_rules)  # Rule(kind, backend, phase)
        self.layer_rules = tuple(layer_rules)  # Rule(pattern, backend, phase), in the order written
        # backend -> the kind it serves: a layer pattern applies to layers of that kind only
        # (a backend not listed, unknown or given without a registry, applies to every layer it matches)
        self.backend_kinds = backend_kinds or {}
        # a plan asks every layer: match each pattern with its regex compiled once
        self._patterns = tuple((r, re.compile(translate(r.target)).match) for r in layer_rules)
        self._phased = any(r.phase for r in kind_rules + layer_rules)

    @classmethod
    def parse(cls, text: str | None, kinds=None, repeats: bool = False,
              backend_kinds: dict[str, str] | None = None) -> "Overrides":
        """Parse rules; ``kinds`` (names) lets an unknown kind be reported now.
        ``repeats`` allows a target named twice (preferences: tried in order).
        ``backend_kinds``: backend name -> the kind it serves (the registry's)."""
        if not text or not text.strip():
            return cls(backend_kinds=backend_kinds)
        what = "preference" if repeats else "backend rule"  # which flag the user should look at
        kind_rules: list[Rule] = []
        layer_rules: list[Rule] = []
        for part in text.split(","):
            part = part.strip()
            if not part:
                continue
            target, sep, backend = (s.strip() for s in part.partition("="))
            if not sep or not target or not backend:
                raise UsageError(f"bad {what} {part!r}: write KIND=BACKEND or LAYER_PATTERN=BACKEND, optionally "
                                 "with a phase, for example attention=sdpa, model.layers.3.*=sdpa or "
                                 "attention@decode=sdpa")
            if not _NAME.fullmatch(backend):
                raise UsageError(f"bad backend name {backend!r} in {what} {part!r}")
            target, at, phase = target.partition("@")
            target = target.strip()
            phase = phase.strip() if at else None
            if at and phase not in PHASES:
                raise UsageError(f"bad phase {phase!r} in {what} {part!r}: a phase is one of {', '.join(PHASES)}")
            if not target:
                raise UsageError(f"bad {what} {part!r}: name a kind or a layer pattern before '@'")
            rules = layer_rules if _GLOB.search(target) else kind_rules
            earlier = [r.backend for r in rules if r.target == target and r.phase == phase]
            if earlier and not repeats:
                where = f"{target}@{phase}" if phase else target
                raise UsageError(f"backend rule for {where!r} is given twice ({earlier[0]} and {backend})")
            if backend in earlier:
                raise UsageError(f"{what} {part!r} is given twice")
            if rules is kind_rules and kinds is not None and target not in kinds:
                raise UsageError(f"{what} {part!r} names unknown kind {target!r}; kinds are "
                                 f"{', '.join(sorted(kinds))} (a layer pattern needs a dot or a glob)")
            rules.append(Rule(target, backend, phase))
        return cls(tuple(kind_rules), tuple(layer_rules), backend_kinds)

    def __bool__(self) -> bool:
        return bool(self.kind_rules or self.layer_rules)

    @property
    def has_phases(self) -> bool:
        """Whether any rule names a phase (else both phases of a layer resolve alike)."""
        return self._phased

    def _matching(self, layer: str | None, kind: str, phase: str | None) -> list[Rule]:
        """The rules naming this layer in ``phase`` (None: rules for both phases only), best first:
        layer patterns, then kind rules; within each, the phase's rules, then those for both."""
        patterns = [r for r, match in self._patterns if layer is not None and (r.phase is None or r.phase == phase)
                    and match(layer) and self.backend_kinds.get(r.backend, kind) == kind]
        kinds = [r for r in self.kind_rules if r.target == kind and (r.phase is None or r.phase == phase)]
        if not self._phased:
            return patterns + kinds
        by_phase = lambda r: r.phase is None  # noqa: E731 (stable: the order written within each)
        return sorted(patterns, key=by_phase) + sorted(kinds, key=by_phase)

    def for_layer(self, layer: str | None, kind: str, phase: str | None = None) -> tuple[str, str] | None:
        """(backend, the rule that named it) for this layer in ``phase``, or None."""
        found = self._matching(layer, kind, phase)
        return (found[0].backend, found[0].text) if found else None

    def all_for_layer(self, layer: str | None, kind: str, phase: str | None = None) -> tuple[tuple[str, str], ...]:
        """Every (backend, rule) naming this layer in ``phase``, best first (preferences)."""
        return tuple((r.backend, r.text) for r in self._matching(layer, kind, phase))

    def __str__(self) -> str:
        return ",".join(r.text for r in self.kind_rules + self.layer_rules)
