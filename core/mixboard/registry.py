"""The registry: loaded kinds and backends, selection and planning.

``get_registry()`` loads the installed plugins once per process. Selection
is memoized per (kind, spec, environment, forced backend), so planning a
model of a thousand layers costs a dictionary lookup per layer.
"""

from __future__ import annotations

import difflib
from fnmatch import fnmatchcase
from typing import Any, Iterable, Mapping

from . import option_rules
from .backend import state_of
from .devices import Device
from .environment import detect
from .environment_facts import Environment
from .errors import SelectionError, UsageError, did_you_mean
from .kinds import BUILTIN_KINDS, Kind
from .overrides import Overrides
from .phases import DECODE, PHASES, PREFILL
from .plan import LayerPlan, Plan
from .plugins import BackendEntry, Loaded, PluginRecord, forget_loaded, loaded
from .selection import Candidate, Selection, rank
from .state import describe_state, same_records


class Registry:
    def __init__(self, loaded: Loaded):
        self.kinds: dict[str, Kind] = loaded.kinds
        self.backends: dict[str, BackendEntry] = loaded.backends
        self.plugins: list[PluginRecord] = loaded.plugins
        self.faults: list[str] = loaded.faults
        self.devices: dict[str, Device] = loaded.devices  # out-of-tree devices plugins describe
        by_kind: dict[str, list[BackendEntry]] = {k: [] for k in self.kinds}
        for name in sorted(self.backends):
            entry = self.backends[name]
            by_kind[entry.cls.kind].append(entry)
        self._by_kind = by_kind
        self._backend_kinds = {name: entry.cls.kind for name, entry in self.backends.items()}
        self._memo: dict[tuple, Selection] = {}

    @classmethod
    def from_backends(cls, backends: Iterable[type], kinds: Iterable[Kind] = (), source: str = "<direct>") -> "Registry":
        """A registry of the given classes, without entry points (for embedding and unit tests).

        Classes are taken as they are: no fault isolation, a duplicate name raises.
        """
        all_kinds = {k.name: k for k in (*BUILTIN_KINDS, *kinds)}
        entries: dict[str, BackendEntry] = {}
        for backend in backends:
            if backend.name in entries:
                raise UsageError(f"backend {backend.name!r} given twice")
            entries[backend.name] = BackendEntry(backend, source, None, None)
        return cls(Loaded(all_kinds, entries, []))

    # -- lookups ---------------------------------------------------------
    def kind(self, name: str) -> Kind:
        try:
            return self.kinds[name]
        except KeyError:
            raise UsageError(f"unknown kind {name!r}; kinds are {', '.join(sorted(self.kinds))}") from None

    def backends_of(self, kind: str) -> list[BackendEntry]:
        self.kind(kind)
        return list(self._by_kind[kind])

    def make_spec(self, kind: str, values: dict[str, str] | None = None) -> Any:
        """The kind's spec from ``key=value`` text; missing fields take their defaults."""
        spec_cls = self.kind(kind).spec
        try:
            return spec_cls.from_strings(values or {})
        except (TypeError, ValueError) as exc:
            raise UsageError(f"bad {kind} spec: {exc}") from None

    def parse_overrides(self, text: str | None) -> Overrides:
        return Overrides.parse(text, kinds=self.kinds, backend_kinds=self._backend_kinds)

    def parse_preferences(self, text: str | None) -> Overrides:
        """Preference rules, every backend checked now: whether a typo is an
        error must not depend on whether an earlier preference served here."""
        prefer = Overrides.parse(text, kinds=self.kinds, repeats=True, backend_kinds=self._backend_kinds)
        for r in prefer.kind_rules + prefer.layer_rules:
            target, backend, rule = r.target, r.backend, r.text
            entry = self.backends.get(backend)
            if entry is None:
                hint = did_you_mean(backend, self.backends)
                raise UsageError(f"preference {rule!r} names unknown backend {backend!r}{hint} (installed: "
                                 f"{', '.join(sorted(self.backends)) or 'none'})")
            if r in prefer.kind_rules and entry.cls.kind != target:
                raise UsageError(f"preference {rule!r} names backend {backend!r}, which serves {entry.cls.kind}, "
                                 f"not {target}")
        return prefer

    # -- selection -------------------------------------------------------
    def select(self, kind: str, spec: Any = None, env: Environment | None = None, *,
               layer: str | None = None, overrides: Overrides | None = None,
               prefer: Overrides | None = None, phase: str | None = None,
               share_state_with: Selection | None = None) -> Selection:
        """The backend for one layer. Raises SelectionError (nothing serves
        it, or a forced backend cannot) or UsageError (bad request).
        ``overrides`` force a backend; ``prefer`` picks one where it can serve.
        ``phase`` (prefill or decode): the backend of that phase's rows, rules
        for the phase counted (None: rules for both phases only).
        ``share_state_with``: the selection of the layer's other phase, whose
        state layout the chosen backend must keep too."""
        if spec is None:
            spec = self.kind(kind).default_spec()
        if env is None:
            env = detect()
        forced = overrides.for_layer(layer, kind, phase) if overrides else None
        preferred = prefer.all_for_layer(layer, kind, phase) if prefer and forced is None else ()
        other = share_state_with
        # with another phase to share state with, the phase is in the reasons
        key = (kind, spec, env, forced, preferred,
               None if other is None else (phase, other.chosen.name, other.state_spec))
        selection = self._memo.get(key)
        if selection is None:
            selection = self._memo[key] = self._select(kind, spec, env, forced, layer, preferred, phase, other)
        return selection

    def _select(self, kind, spec, env, forced, layer, preferred=(), phase=None, other=None) -> Selection:
        kind_obj = self.kind(kind)
        if not isinstance(spec, kind_obj.spec):
            raise UsageError(f"a {kind} layer needs a {kind_obj.spec.__name__}, not {type(spec).__name__}")
        where = f"layer {layer!r}" if layer else f"this {kind} layer"
        if phase is not None and other is not None:
            where += f" ({phase} rows)"
        candidates = rank(self._by_kind[kind], spec, env)
        if other is not None:
            candidates = self._sharing_state(candidates, kind_obj, spec, other, phase)
        if forced is not None:
            name, rule = forced
            entry = self._forced_entry(name, rule, kind, where)
            reasons = next(c.reasons for c in candidates if c.name == name)  # the state check's too, if any
            if reasons:
                raise SelectionError(
                    f"backend {name!r} is forced by rule {rule!r} but cannot serve {where} in {env}: "
                    + "; ".join(reasons) + f" ({_remedy(rule)}; mixboard never falls back silently)",
                    {name: list(reasons)},
                )
            rejected = {c.name: c.reasons or (f"not forced: rule {rule!r} picks {name}",)
                        for c in candidates if c.name != name}
        else:
            if not candidates or not candidates[0].available:
                raise SelectionError(self._nothing_serves(kind_obj, where, env, candidates),
                                     {c.name: list(c.reasons) for c in candidates})
            rule = None
            winner, preferred_by, passed_over = self._preferred(candidates, preferred, kind, where)
            entry = self.backends[winner.name]
            rejected = {}
            for c in candidates:
                if c is winner:
                    continue
                why = c.reasons or (f"available, but rule {preferred_by!r} prefers {winner.name!r}" if preferred_by
                                    else _lost_to(c, winner),)
                if c.name in passed_over:  # say why a preference did not take
                    why = (f"preferred by rule {passed_over[c.name]!r} but cannot serve it",) + why
                rejected[c.name] = why
            return Selection(kind, spec, env, entry, state_of(entry.cls, kind_obj, spec), candidates, rejected,
                             rule, preferred_by)
        return Selection(kind, spec, env, entry, state_of(entry.cls, kind_obj, spec), candidates, rejected, rule)

    def _sharing_state(self, candidates, kind_obj: Kind, spec, other: Selection, phase: str | None):
        """``candidates`` with a reason against each that keeps the layer's state in another layout than
        ``other`` (the backend of the layer's other phase): both phases read and write one state."""
        if not kind_obj.row_inputs:
            why = (f"kind {kind_obj.name!r} does not declare its per-row inputs (Kind.row_inputs), so " + _NO_SPLIT,)
            marked = [Candidate(c.name, c.priority, c.reasons + why) if c.name != other.chosen.name else c
                      for c in candidates]
        else:
            marked = []
            for c in candidates:
                entry = self.backends[c.name]
                state = state_of(entry.cls, kind_obj, spec)
                if c.name != other.chosen.name and not same_records(state, other.state_spec):
                    c = Candidate(c.name, c.priority, c.reasons + (
                        f"keeps the layer's state as {describe_state(state)}, but {other.chosen.name!r}, which "
                        f"runs its {_other_phase(phase)} rows, keeps {describe_state(other.state_spec)}: "
                        + _SHARED,))
                marked.append(c)
        return tuple(sorted(marked, key=lambda c: (not c.available, -c.priority, c.name)))

    def _preferred(self, candidates, preferred, kind: str, where: str):
        """(winner, the preference rule that picked it or None, {backend passed over: its rule}):
        the first preferred backend that can serve the layer, else the best by priority."""
        by_name = {c.name: c for c in candidates}
        passed_over: dict[str, str] = {}
        for name, rule in preferred:  # a backend of another kind is an error, whichever serves here
            self._forced_entry(name, rule, kind, where, "prefers")
        for name, rule in preferred:
            candidate = by_name[name]
            if candidate.available:
                return candidate, rule, passed_over
            passed_over.setdefault(name, rule)
        return candidates[0], None, passed_over

    def _forced_entry(self, name: str, rule: str, kind: str, where: str, verb: str = "forces") -> BackendEntry:
        entry = self.backends.get(name)
        if entry is None:
            names = [e.name for e in self._by_kind[kind]]
            hint = did_you_mean(name, self.backends)
            raise UsageError(f"rule {rule!r} names unknown backend {name!r}; backends of {kind}: "
                             f"{', '.join(names) or 'none installed'}{hint}")
        if entry.cls.kind != kind:
            raise UsageError(f"rule {rule!r} {verb} backend {name!r}, which serves {entry.cls.kind}, "
                             f"onto {where} of kind {kind}")
        return entry

    @staticmethod
    def _nothing_serves(kind: Kind, where: str, env: Environment, candidates) -> str:
        if not candidates:
            hint = f": {kind.install_hint}" if kind.install_hint else ""
            return f"no backend of kind {kind.name!r} is installed{hint}"
        lines = [f"no backend can serve {where} in {env}:"]
        for c in candidates:
            lines.append(f"  {c.name}: " + "; ".join(c.reasons))
        if kind.install_hint:
            lines.append(f"  a portable backend: {kind.install_hint}")
        return "\n".join(lines)

    # -- planning --------------------------------------------------------
    def plan(self, layers: Iterable[tuple[str, str, Any]], env: Environment | None = None,
             overrides: Overrides | str | None = None, prefer: Overrides | str | None = None,
             options: str | Mapping | None = None) -> Plan:
        """Resolve every layer, given as (name, kind, spec); ``overrides``
        force backends, ``prefer`` picks them where they can serve;
        ``options`` set backend options (option_rules.py: text or a mapping)."""
        given = option_rules.parse(options, self.backends)  # before selecting: a typo costs nothing
        if env is None:
            env = detect()
        if isinstance(overrides, str) or overrides is None:
            overrides = self.parse_overrides(overrides)
        if isinstance(prefer, str) or prefer is None:
            prefer = self.parse_preferences(prefer)
        has_rules = bool(overrides)
        preferring = bool(prefer)
        phased = overrides.has_phases or prefer.has_phases
        # Models repeat the same spec object layer after layer: look those up
        # by identity within this call before hashing specs for the memo.
        by_identity: dict[tuple, tuple[Selection, Selection | None]] = {}
        planned = []
        seen = set()
        for name, kind, spec in layers:
            if name in seen:
                raise UsageError(f"layer name {name!r} appears twice")
            seen.add(name)
            if not (has_rules or preferring):
                rules = _NO_RULES
            elif phased:
                rules = tuple(self._rules_for(overrides, prefer, name, kind, phase) for phase in PHASES)
            else:
                forced = overrides.for_layer(name, kind) if has_rules else None
                rules = ((forced, prefer.all_for_layer(name, kind) if preferring and forced is None else ()),)
            key = (kind, id(spec), rules)
            chosen = by_identity.get(key)
            if chosen is None:
                chosen = by_identity[key] = self._select_phases(kind, spec, env, name, overrides, prefer, rules)
            planned.append(LayerPlan(name, kind, spec, *chosen))
        self._check_used(overrides, prefer, {key[2] for key in by_identity}, planned)
        running = [(kind, s.chosen.name, s.backend) for (kind, _, _), chosen in by_identity.items()
                   for s in chosen if s is not None]  # both phases' backends, each distinct selection once
        return Plan(env, tuple(planned), option_rules.for_plan(given, running, self.backends))

    @staticmethod
    def _rules_for(overrides: Overrides, prefer: Overrides, name: str, kind: str, phase: str):
        forced = overrides.for_layer(name, kind, phase) if overrides else None
        return forced, prefer.all_for_layer(name, kind, phase) if prefer and forced is None else ()

    def _select_phases(self, kind, spec, env, name, overrides, prefer, rules) -> tuple[Selection, Selection | None]:
        """(the selection of the layer's prefill rows, and of its decode rows where another backend runs them)."""
        def pick(phase, other=None):
            return self.select(kind, spec, env, layer=name, overrides=overrides, prefer=prefer, phase=phase,
                               share_state_with=other)

        if len(rules) == 1 or rules[0] == rules[1]:  # no rule tells the phases apart
            return pick(PREFILL if len(rules) == 2 else None), None
        prefill_forced, decode_forced = rules[0][0] is not None, rules[1][0] is not None
        if decode_forced and not prefill_forced:  # the forced phase leads; the other must share its state
            decode = pick(DECODE)
            prefill = pick(PREFILL, decode)
        else:
            prefill = pick(PREFILL)
            decode = pick(DECODE, prefill)
        if decode.chosen.name != prefill.chosen.name:
            return prefill, decode
        # One backend for both: show the selection that explains it: the phase that followed the other's
        # state layout where that turned a backend down, else the one a rule made.
        if _turned_down_for_sharing(prefill):
            return prefill, None
        return (decode if _ruled(decode) and not _ruled(prefill) else prefill), None

    def check_rules_used(self, overrides: Overrides, prefer: Overrides, layers: list[tuple[str | None, str]]) -> None:
        """Every rule must name some of ``layers`` ((name, kind) pairs): a
        forcing rule must pick one's backend, a preference must name one that
        no forcing rule picks. A rule that cannot mean anything is an error
        saying what it could have meant, never silently ignored."""
        phases = PHASES if overrides.has_phases or prefer.has_phases else (None,)
        rule_sets = {tuple(self._rules_for(overrides, prefer, name, kind, phase) for phase in phases)
                     for name, kind in layers}
        self._check_used(overrides, prefer, rule_sets, [_Named(name, kind) for name, kind in layers])

    def _check_used(self, overrides: Overrides, prefer: Overrides, rule_sets, planned) -> None:
        """``rule_sets``: each layer's ((forced, preferred) per phase), as ``_rules_for`` gives them;
        ``planned``: the layers, objects with a name and a kind (read only when a rule went unused)."""
        if overrides:
            used = {forced[1] for rules in rule_sets for forced, _ in rules if forced}
            self._check_rules_used(overrides, used, planned)
        if prefer:
            named = {rule for rules in rule_sets for _, preferred in rules for _, rule in preferred}
            self._check_rules_used(prefer, named, planned, preferences=True)

    def _check_rules_used(self, overrides: Overrides, used: set[str], planned, preferences: bool = False) -> None:
        for r in overrides.kind_rules + overrides.layer_rules:
            target, backend, rule = r.target, r.backend, r.text
            if rule in used:
                continue
            if preferences:
                is_kind = r in overrides.kind_rules
                named = [layer for layer in planned
                         if (layer.kind == target if is_kind
                             else layer.name is not None and fnmatchcase(layer.name, target)
                             and layer.kind == self._backend_kinds.get(backend, layer.kind))]
                if named:  # every layer it names is forced: the preference can never act
                    raise UsageError(f"preference {rule!r} names only layers that backend rules force "
                                     f"({named[0].name}{', ...' if len(named) > 1 else ''}); drop it")
            if backend not in self.backends:
                hint = did_you_mean(backend, self.backends)
                raise UsageError(f"rule {rule!r} names unknown backend {backend!r}{hint} (installed: "
                                 f"{', '.join(sorted(self.backends)) or 'none'})")
            if r in overrides.kind_rules:
                kinds = sorted({layer.kind for layer in planned})
                if target in kinds:
                    raise UsageError(f"rule {rule!r} matches no layer: layer patterns pick every {target} layer "
                                     "before it; drop the rule")
                raise UsageError(f"rule {rule!r} matches no layer: this model has no {target} layers "
                                 f"(its layers are of kind {', '.join(kinds) or 'none'}); drop the rule")
            serves = self._backend_kinds[backend]
            others = sorted({layer.kind for layer in planned if layer.name is not None and layer.kind != serves
                             and fnmatchcase(layer.name, target)})
            if others and not any(layer.kind == serves and layer.name is not None and fnmatchcase(layer.name, target)
                                  for layer in planned):
                raise UsageError(f"rule {rule!r} matches no {serves} layer: {backend!r} serves {serves}, and the "
                                 f"layers it names are of kind {', '.join(others)}; name a layer of kind {serves}")
            if all(layer.name is None for layer in planned):  # `mixboard select` without --layer: nothing to match
                raise UsageError(f"rule {rule!r} is a layer pattern: give the layer's name (--layer NAME) "
                                 f"for it to match")
            # The examples are layers the backend could run: a norm is no hint for an attention rule.
            served = [layer.name for layer in planned if layer.name is not None and layer.kind == serves]
            if not served:
                raise UsageError(f"rule {rule!r} matches no layer: {backend!r} serves {serves}, and this model "
                                 f"has no {serves} layers; drop the rule")
            shadowed = [n for n in served if fnmatchcase(n, target)]
            if shadowed:
                raise UsageError(f"rule {rule!r} picks no layer: rules before it pick every layer it matches "
                                 f"({shadowed[0]}{', ...' if len(shadowed) > 1 else ''}); drop or reorder it")
            close = difflib.get_close_matches(target, served, n=1, cutoff=0.5)
            hint = f"did you mean {close[0]!r}? " if close else ""
            shown = ", ".join(served[:3]) + (", ..." if len(served) > 3 else "")
            raise UsageError(f"rule {rule!r} matches no layer of this model; {hint}its {serves} layers are named "
                             f"like {shown}")


class _Named:
    """A layer as the rule checks see it: its name and kind."""

    __slots__ = ("name", "kind")

    def __init__(self, name: str | None, kind: str):
        self.name, self.kind = name, kind


_NO_RULES = ((None, ()),)  # (forced, preferred) for both phases: a plan without rules
_SHARED = "a layer's two phases share one state"
_NO_SPLIT = "its layers cannot split their rows by phase"


def _turned_down_for_sharing(selection: Selection) -> bool:
    """Whether sharing the other phase's state cost this phase a backend it would have ranked first."""
    rank_of = {c.name: (-c.priority, c.name) for c in selection.candidates}
    chosen = rank_of[selection.chosen.name]
    return any(rank_of[c.name] < chosen and len(c.reasons) == 1 and c.reasons[0].endswith((_SHARED, _NO_SPLIT))
               for c in selection.candidates)


def _ruled(selection: Selection) -> bool:
    return selection.rule is not None or selection.preferred_by is not None


def _remedy(rule: str) -> str:
    """What to do about a forcing rule that cannot serve: a rule the user wrote can change; a lock's
    (``lock FILE``, mixboard.lock) was written for another model or machine."""
    if rule.startswith("lock "):
        return "the lock was written for another model or machine: write it again here with `mixboard lock`"
    return "change or drop the rule"


def _other_phase(phase: str | None) -> str:
    return PREFILL if phase == DECODE else DECODE


def _lost_to(candidate, winner) -> str:
    if candidate.priority == winner.priority:
        return f"available, but {winner.name!r} has the same priority ({winner.priority}) and ties break on name"
    return f"available, but {winner.name!r} has higher priority ({winner.priority} > {candidate.priority})"


_REGISTRY: Registry | None = None


def get_registry() -> Registry:
    """The process-wide registry: entry points scanned and loaded once."""
    global _REGISTRY
    if _REGISTRY is None:
        _REGISTRY = Registry(loaded())
    return _REGISTRY


def reload_registry() -> Registry:
    """Scan entry points again (after installing a plugin in this process)."""
    global _REGISTRY
    _REGISTRY = None
    forget_loaded()
    return get_registry()
