"""Backend options as users set them, checked against the registry and the plan.

Text, as ``--backend-option`` and ``$MIXBOARD_BACKEND_OPTIONS`` take it:
``linear_onednn.layout=as_loaded,sdpa.decode_chunk_mib=16``; or a mapping
``{backend: {option: value}}`` (``Engine(backend_options=...)``,
``Registry.plan(options=...)``, a lock file's JSON), whose values may be of
the option's type or text. Every name and value is checked before anything
is selected (``parse``); once the plan is made, every backend named must run
some layer of it (``for_plan``): an option that would change nothing is an
error, never silently ignored, as a backend rule that matches no layer is.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from .errors import UsageError, did_you_mean
from .options import OptionValues, defaults

EXAMPLE = "for example linear_onednn.layout=as_loaded"


def parse(given: str | Mapping | None, backends: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """{backend: {option: value}} of what the user gave, every value of its option's type.
    ``backends``: the registry's (name -> BackendEntry, or the Backend class itself).
    Raises UsageError, one line."""
    if given is None:
        return {}
    if isinstance(given, str):
        items = _from_text(given)
    elif isinstance(given, Mapping):
        items = _from_mapping(given)
    else:
        raise UsageError(f"backend options must be text (BACKEND.OPTION=VALUE,...) or a mapping "
                         f"{{backend: {{option: value}}}}, not {type(given).__name__}")
    out: dict[str, dict[str, Any]] = {}
    for backend, name, raw, item in items:
        option = _declared(backend, name, item, backends)
        try:
            value = option.coerce(raw)
        except ValueError as exc:
            raise UsageError(f"backend option {item!r}: {exc} ({option.doc})") from None
        values = out.setdefault(backend, {})
        if name in values:
            raise UsageError(f"backend option {backend}.{name} is given twice ({values[name]!r} and {value!r})")
        values[name] = value
    return out


def for_plan(given: Mapping[str, Mapping[str, Any]], chosen: Iterable[tuple[str, str, type]],
             backends: Mapping[str, Any]) -> dict[str, OptionValues]:
    """The options of every backend the plan runs that declares any: its defaults, with what
    ``given`` (``parse``'s result) sets. ``chosen``: (kind, backend name, backend class) per layer."""
    used: dict[str, type] = {}
    by_kind: dict[str, dict[str, None]] = {}
    for kind, name, cls in chosen:
        used.setdefault(name, cls)
        by_kind.setdefault(kind, {})[name] = None
    for backend, values in given.items():
        if backend not in used:
            item = f"{backend}.{next(iter(values))}={next(iter(values.values()))}"
            kind = backends[backend].cls.kind
            where = (f"its {kind} layers run on {', '.join(by_kind[kind])} (force it with --backend "
                     f"{kind}={backend}, or drop the option)" if kind in by_kind
                     else f"this model has no {kind} layers (drop the option)")
            raise UsageError(f"backend option {item!r} names backend {backend!r}, which no layer of this model "
                             f"runs: {where}")
    return {name: OptionValues({**defaults(cls), **given.get(name, {})})
            for name, cls in sorted(used.items()) if getattr(cls, "options", ())}


def with_options(rows: list[list], options: Mapping[str, Mapping[str, Any]]) -> list[list]:
    """Fingerprint rows (``Plan.fingerprint_rows``: the backend at index 3, a decode backend at index
    7 after "decode"), each row whose backends declare options followed by their values,
    {backend: {option: value}}. The values are the resolved ones, so an option given at its default
    fingerprints as one left out; rows of backends without options are as they were."""
    if not options:
        return rows
    out = []
    for row in rows:
        names = [row[3]] + ([row[7]] if len(row) > 7 and row[6] == "decode" else [])
        values = {name: dict(options[name]) for name in names if name in options}
        out.append(row + [values] if values else row)
    return out


def _from_text(text: str) -> list[tuple[str, str, str, str]]:
    items = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        target, sep, value = (s.strip() for s in part.partition("="))
        backend, dot, name = (s.strip() for s in target.partition("."))
        if not (sep and dot and backend and name and value):
            raise UsageError(f"bad backend option {part!r}: write BACKEND.OPTION=VALUE, {EXAMPLE}")
        items.append((backend, name, value, part))
    return items


def _from_mapping(given: Mapping) -> list[tuple[str, str, Any, str]]:
    items = []
    for backend, values in given.items():
        if not isinstance(backend, str) or not isinstance(values, Mapping):
            raise UsageError(f"backend options map each backend's name to {{option: value}}; got {backend!r}: "
                             f"{values!r}")
        for name, value in values.items():
            items.append((backend, str(name), value, f"{backend}.{name}={value}"))
    return items


def _declared(backend: str, name: str, item: str, backends: Mapping[str, Any]):
    entry = backends.get(backend)
    if entry is None:
        hint = did_you_mean(backend, backends)
        raise UsageError(f"backend option {item!r} names unknown backend {backend!r}{hint} (installed: "
                         f"{', '.join(sorted(backends)) or 'none'})")
    declared = {o.name: o for o in getattr(getattr(entry, "cls", entry), "options", ())}
    if not declared:
        having = sorted(n for n, e in backends.items() if getattr(getattr(e, "cls", e), "options", ()))
        raise UsageError(f"backend option {item!r}: backend {backend!r} declares no options (backends that do: "
                         f"{', '.join(having) or 'none installed'}; `mixboard backends NAME` lists them)")
    option = declared.get(name)
    if option is None:
        hint = did_you_mean(name, declared)
        raise UsageError(f"backend option {item!r}: {backend} has no option {name!r}{hint} (its options: "
                         f"{', '.join(declared)})")
    return option


def for_backend(backend: type, given: Mapping[str, Any] | None) -> OptionValues:
    """``backend``'s options: its defaults, with ``given`` ({option: value}, checked as ``parse``
    checks them) set. What the conformance kit runs a backend with."""
    values = parse({backend.name: dict(given)}, {backend.name: backend}) if given else {}
    return OptionValues({**defaults(backend), **values.get(backend.name, {})})
