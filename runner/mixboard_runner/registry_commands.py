"""CLI commands that ask the registry: ``plugins``, ``backends``, ``select``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import textwrap

from mixboard.dtypes import DTYPES

from . import backend_options, environment_flags, rule_flags
from .table import render


def add_commands(commands) -> None:
    p = commands.add_parser("plugins", help="list installed plugins, their backends and faults",
                            description="List the plugins found under the entry-point group 'mixboard', "
                                        "with their distribution, version, status (ok, error, disabled), "
                                        "the cause of any fault and the backends each registered.")
    p.add_argument("--json", action="store_true", help="print a JSON list (stable contract)")
    p.set_defaults(run=cmd_plugins)

    p = commands.add_parser("backends", help="list backends and whether each is available here",
                            description=textwrap.fill(
                                        "List every registered backend. 'available' means it would pass its "
                                        "checks for its kind's default spec in the environment (detected, or "
                                        "simulated with --device, --capability, --arch, --cpu-features); "
                                        "'reasons' says why not. The default spec is float32; a backend that does "
                                        "not serve float32 is checked in the first dtype it declares, unless "
                                        "--dtype is given. The first line shows the environment: device, GPU "
                                        "runtime and architecture, or CPU features. With --json every backend "
                                        "carries it as 'environment'. With NAME, that backend alone, its "
                                        "description and the options users may set for it (--backend-option).", 79),
                            epilog="examples:\n  mixboard backends --arch sm_90\n  mixboard backends linear_onednn"
                                   "            its options, with types, defaults and choices\n\n"
                                   + environment_flags.EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", nargs="?", metavar="NAME", help="only this backend, with its description and options")
    p.add_argument("--kind", help="only backends of this kind")
    p.add_argument("--dtype", choices=DTYPES, help="check every backend in this dtype")
    _add_environment(p)
    p.add_argument("--json", action="store_true", help="print a JSON list (stable contract)")
    p.set_defaults(run=cmd_backends)

    p = commands.add_parser("select", help="which backend a layer of KIND would get, and why",
                            description=textwrap.fill("Resolve one layer: every candidate with its reasons, and the "
                                                      "choice. Spec fields not given take the kind's documented "
                                                      "defaults.", 79),
                            epilog="example: mixboard select attention --spec num_heads=32,num_kv_heads=8,"
                                   "sliding_window=4096 --arch sm_80\n\n" + environment_flags.EPILOG,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kind", metavar="KIND", help="attention, mamba1, mamba2, short_conv, or a kind a plugin defines")
    p.add_argument("--spec", default="", metavar="KEY=VALUE,...",
                   help="spec fields, e.g. num_heads=32,dtype=bfloat16 (see the fields with --spec help)")
    p.add_argument("--layer", metavar="NAME", help="the layer's name, for layer-pattern rules in --backend")
    rule_flags.add_flags(p)
    _add_environment(p)
    p.add_argument("--json", action="store_true", help="print a JSON object (stable contract)")
    p.set_defaults(run=cmd_select)


def _add_environment(p: argparse.ArgumentParser) -> None:
    environment_flags.add_flags(p)


def cmd_plugins(args) -> int:
    from mixboard import get_registry

    records = [r.to_dict() for r in get_registry().plugins]
    if args.json:
        print(json.dumps(records, indent=2))
        return 0
    if not records:
        print("no mixboard plugins installed (a plugin publishes the entry-point group 'mixboard')")
        return 0
    rows = [[r["name"], r["distribution"] or "-", r["version"] or "-", r["status"], ", ".join(r["backends"]) or "-"]
            for r in records]
    print(render(["plugin", "distribution", "version", "status", "backends"], rows))
    for r in records:
        for kind in r["kinds"]:
            print(f"\n{r['name']}: defines kind {kind}")
        for device in r["devices"]:
            print(f"\n{r['name']}: describes device {device['name']}: {device['description']}")
    for r in records:
        if r["error"]:
            print(f"\n{r['name']}: {r['error']}")
    return 0


def cmd_backends(args) -> int:
    from mixboard import get_registry
    from mixboard.selection import reasons_against

    registry = get_registry()
    env, notes = environment_flags.resolve(args)
    environment = env.to_dict()
    if args.name is not None:
        entries = [backend_options.entry(registry, args.name, args.kind)]
    else:
        entries = registry.backends_of(args.kind) if args.kind else [registry.backends[n] for n in sorted(registry.backends)]
    out = []
    for e in sorted(entries, key=lambda e: (e.cls.kind, -e.cls.priority, e.name)):
        spec = registry.kind(e.cls.kind).default_spec()
        dtype = args.dtype or (spec.dtype if spec.dtype in e.cls.dtypes else e.cls.dtypes[0])
        reasons = reasons_against(e.cls, dataclasses.replace(spec, dtype=dtype), env)
        out.append({
            "name": e.name, "kind": e.cls.kind, "plugin": e.plugin, "distribution": e.distribution,
            "version": e.version, "priority": e.cls.priority, "devices": list(e.cls.devices),
            "dtypes": list(e.cls.dtypes), "available": not reasons, "reasons": list(reasons),
            "environment": environment, "options": [o.to_dict() for o in e.cls.options],
            "capture": e.cls.capture,
        })
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    environment_flags.print_environment(env, notes)
    for device in registry.devices.values():
        print(f"device {device.name} (from a plugin): {device.description}")
    if not out:
        print("no backends registered" + (f" for kind {args.kind}" if args.kind else "")
              + "; install a plugin, e.g. pip install mixboard-sdpa")
    else:
        rows = [[b["name"], b["kind"], str(b["priority"]), "yes" if b["available"] else "no",
                 b["distribution"] or b["plugin"], "; ".join(b["reasons"])] for b in out]
        print(render(["backend", "kind", "priority", "available", "from", "reasons"], rows))
    if args.name is not None:
        backend_options.print_detail(entries[0])
    if registry.faults:
        print(f"\n{len(registry.faults)} plugin fault(s) left backends out: see `mixboard plugins`")
    return 0


def parse_spec_text(text: str) -> dict[str, str]:
    from mixboard.errors import UsageError

    values: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = (s.strip() for s in part.partition("="))
        if not sep or not key:
            raise UsageError(f"bad --spec item {part!r}: write KEY=VALUE, for example num_heads=32")
        if key in values:
            raise UsageError(f"--spec gives {key!r} twice")
        values[key] = value
    return values


def cmd_select(args) -> int:
    from mixboard import get_registry
    from mixboard.errors import SelectionError, UsageError

    registry = get_registry()
    kind = registry.kind(args.kind)
    if args.spec.strip() == "help":
        print(f"{kind.name} spec fields (name: type = default):")
        for name, text in kind.spec.field_help().items():
            print(f"  {name}: {text}")
        return 0
    spec = registry.make_spec(args.kind, parse_spec_text(args.spec))
    overrides = registry.parse_overrides(rule_flags.forced(args))
    prefer = registry.parse_preferences(rule_flags.preferred(args))
    env, notes = environment_flags.resolve(args)
    registry.check_rules_used(overrides, prefer, [(args.layer, args.kind)])  # as strict as a plan's
    try:
        selection = registry.select(args.kind, spec, env, layer=args.layer, overrides=overrides, prefer=prefer)
    except SelectionError as exc:
        if args.json:
            from mixboard.selection import rank

            candidates = rank(registry.backends_of(args.kind), spec, env)
            print(json.dumps({"kind": args.kind, "spec": spec.to_dict(), "environment": env.to_dict(),
                              "chosen": None, "error": str(exc),
                              "candidates": [c.to_dict() for c in candidates]}, indent=2))
            return 1
        raise
    if args.json:
        print(json.dumps(selection.to_dict(), indent=2))
        return 0
    rule = (f" (forced by rule {selection.rule})" if selection.rule else
            f" (preferred by rule {selection.preferred_by})" if selection.preferred_by else "")
    print(f"{args.kind} -> {selection.chosen.name}{rule}")
    environment_flags.print_environment(env, notes)
    print("spec: " + ", ".join(f"{k}={v}" for k, v in spec.to_dict().items()))
    rows = []
    for c in selection.candidates:
        why = "chosen" if c.name == selection.chosen.name else "; ".join(selection.rejected.get(c.name, ()))
        rows.append([c.name, str(c.priority), "yes" if c.available else "no", why])
    print(render(["candidate", "priority", "available", "why"], rows))
    return 0
