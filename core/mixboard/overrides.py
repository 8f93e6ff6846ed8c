"""Backend overrides: ``attention=sdpa,mamba2=mamba2_torch,model.layers.3.*=sdpa``.

A target without a dot or glob character names a kind; one with either is a
layer-name pattern (``fnmatch`` syntax). For a layer, the first layer pattern
that matches wins, then the rule for its kind. A layer pattern picks only
layers of the kind its backend serves: ``model.layers.3.*=sdpa`` forces the
attention of block 3 and leaves its norms and projections (layers of other
kinds, named under the same block) to their own rules. Overrides are strict:
the named backend must serve the layer or selection fails.

Preferences (``--prefer``, ``$MIXBOARD_PREFER``) use the same rules without
the strictness: a preferred backend that can serve a layer wins whatever its
priority; one that cannot is passed over, with its reasons in the plan. A
target may be named more than once there, the backends tried in the order
written.
"""

from __future__ import annotations

import re
from fnmatch import fnmatchcase

from .errors import UsageError

_GLOB = re.compile(r"[.*?\[]")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Overrides:
    __slots__ = ("kind_rules", "layer_rules", "backend_kinds")

    def __init__(self, kind_rules: tuple[tuple[str, str], ...] = (), layer_rules: tuple[tuple[str, str], ...] = (),
                 backend_kinds: dict[str, str] | None = None):
        self.kind_rules = kind_rules  # (kind, backend)
        self.layer_rules = layer_rules  # (pattern, backend), in the order written
        # backend -> the kind it serves: a layer pattern applies to layers of that kind only
        # (a backend not listed, unknown or given without a registry, applies to every layer it matches)
        self.backend_kinds = backend_kinds or {}

    @classmethod
    def parse(cls, text: str | None, kinds=None, repeats: bool = False,
              backend_kinds: dict[str, str] | None = None) -> "Overrides":
        """Parse rules; ``kinds`` (names) lets an unknown kind be reported now.
        ``repeats`` allows a target named twice (preferences: tried in order).
        ``backend_kinds``: backend name -> the kind it serves (the registry's)."""
        if not text or not text.strip():
            return cls(backend_kinds=backend_kinds)
        what = "preference" if repeats else "backend rule"  # which flag the user should look at
        kind_rules: list[tuple[str, str]] = []
        layer_rules: list[tuple[str, str]] = []
        for part in text.split(","):
            part = part.strip()
            if not part:
                continue
            target, sep, backend = (s.strip() for s in part.partition("="))
            if not sep or not target or not backend:
                raise UsageError(f"bad {what} {part!r}: write KIND=BACKEND or LAYER_PATTERN=BACKEND, "
                                 "for example attention=sdpa or model.layers.3.*=sdpa")
            if not _NAME.fullmatch(backend):
                raise UsageError(f"bad backend name {backend!r} in {what} {part!r}")
            rules = layer_rules if _GLOB.search(target) else kind_rules
            earlier = [b for t, b in rules if t == target]
            if earlier and not repeats:
                raise UsageError(f"backend rule for {target!r} is given twice ({earlier[0]} and {backend})")
            if backend in earlier:
                raise UsageError(f"{what} {part!r} is given twice")
            if rules is kind_rules and kinds is not None and target not in kinds:
                raise UsageError(f"{what} {part!r} names unknown kind {target!r}; kinds are "
                                 f"{', '.join(sorted(kinds))} (a layer pattern needs a dot or a glob)")
            rules.append((target, backend))
        return cls(tuple(kind_rules), tuple(layer_rules), backend_kinds)

    def __bool__(self) -> bool:
        return bool(self.kind_rules or self.layer_rules)

    def for_layer(self, layer: str | None, kind: str) -> tuple[str, str] | None:
        """(backend, the rule that named it) for this layer, or None."""
        if layer is not None:
            for pattern, backend in self.layer_rules:
                if fnmatchcase(layer, pattern) and self.backend_kinds.get(backend, kind) == kind:
                    return backend, f"{pattern}={backend}"
        for target, backend in self.kind_rules:
            if target == kind:
                return backend, f"{target}={backend}"
        return None

    def all_for_layer(self, layer: str | None, kind: str) -> tuple[tuple[str, str], ...]:
        """Every (backend, rule) naming this layer, best first: layer patterns
        in the order written, then the kind's rules (preferences)."""
        found = [(b, f"{p}={b}") for p, b in self.layer_rules
                 if layer is not None and fnmatchcase(layer, p) and self.backend_kinds.get(b, kind) == kind]
        found += [(b, f"{t}={b}") for t, b in self.kind_rules if t == kind]
        return tuple(found)

    def __str__(self) -> str:
        return ",".join(f"{t}={b}" for t, b in self.kind_rules + self.layer_rules)
