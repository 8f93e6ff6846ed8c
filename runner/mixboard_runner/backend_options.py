"""``mixboard backends NAME``: one backend, its description and the options users may set."""

from __future__ import annotations

from .table import render


def entry(registry, name: str, kind: str | None):
    """The registry's entry for ``name``; a UsageError naming the close match if there is none."""
    from mixboard.errors import UsageError, did_you_mean

    found = registry.backends.get(name)
    if found is None:
        hint = did_you_mean(name, registry.backends)
        raise UsageError(f"unknown backend {name!r}{hint} (installed: {', '.join(sorted(registry.backends)) or 'none'};"
                         f" see `mixboard plugins` for plugins that failed to load)")
    if kind is not None and found.cls.kind != kind:
        raise UsageError(f"backend {name!r} serves {found.cls.kind}, not {kind}: drop --kind or name another backend")
    return found


def print_detail(found) -> None:
    from mixboard.capture import PROMISES

    cls = found.cls
    print()
    if cls.description:
        print(f"{cls.name}: {cls.description}")
    print(f"graph capture: {cls.capture} ({PROMISES[cls.capture]}; docs/plugins.md)")
    if not cls.options:
        print(f"{cls.name} declares no options.")
        return
    print(f"options (--backend-option {cls.name}.OPTION=VALUE, or $MIXBOARD_BACKEND_OPTIONS):")
    rows = [[o.name, o.type_name, _shown(o.default), _allowed(o), o.doc] for o in cls.options]
    print(render(["option", "type", "default", "allowed", "what it does"], rows))


def _shown(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _allowed(option) -> str:
    if option.choices is not None:
        return ", ".join(_shown(c) for c in option.choices)
    if option.type is bool:
        return "true, false"
    return f">= {option.minimum}" if option.minimum is not None else "any"
