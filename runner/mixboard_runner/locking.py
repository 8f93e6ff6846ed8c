"""Planning with a lock file (``mixboard.lock``) and the ``lock`` command that writes one.

With a lock, every layer's backends are the lock's, or nothing runs: what
keeps the lock from being reproduced here (a backend not installed, another
plugin version, another device) is checked before planning and reported in
one message; rules (``--backend``, ``--prefer``) cannot be combined with it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from . import environment_flags, option_flags, rule_flags


def add_flag(p) -> None:
    """--lock (run, explain: reproduce a lock file's choices)."""
    p.add_argument("--lock", default=None, metavar="FILE",
                   help="reproduce this lock file's choices exactly (`mixboard lock` or `mixboard tune` wrote it), "
                        "or fail saying what differs here (default: $MIXBOARD_LOCK)")


def given(args) -> str | None:
    """The lock file's path, from --lock or else $MIXBOARD_LOCK; None if neither."""
    return args.lock if args.lock is not None else os.environ.get("MIXBOARD_LOCK") or None


def planned(registry, decls, env, backend: str | None, prefer: str | None, lock, options=None,
            model_type: str | None = None):
    """The plan of ``decls``: by the rules and backend ``options``, or exactly the lock's (a path or a
    ``mixboard.lock.Lock``), its options included. ``model_type``: the checkpoint's, which a lock's
    must match."""
    if lock is None:
        return registry.plan(decls, env, backend, prefer, options)
    from mixboard.errors import UsageError
    from mixboard.lock import Lock

    if backend or prefer:
        raise UsageError("a lock fixes every layer's backends: give it without backend rules or preferences "
                         "(--backend, --prefer, $MIXBOARD_BACKEND, $MIXBOARD_PREFER), or write a new lock with them")
    if options:
        raise UsageError("a lock fixes the backends' options too: give it without --backend-option or "
                         "$MIXBOARD_BACKEND_OPTIONS, or write a new lock with them")
    if not isinstance(lock, Lock):
        lock = Lock.read(lock)
    decls = list(decls)
    lock.refuse(lock.differences(registry, env, decls, model_type=model_type))
    with lock.blamed():
        plan = registry.plan(decls, env, lock.rules(), options=lock.options)
    lock.refuse(lock.check_plan(plan))
    return plan


def add_commands(commands) -> None:
    from .run_commands import MODEL_HELP, _add_common, _raw

    p = commands.add_parser(
        "lock", help="write a lock file: the plan's every choice, to reproduce exactly elsewhere",
        description="Plan a model (without loading its weights) and write the plan down: per group of layers the "
                    "backend of each phase, the plugin distributions and versions they came from, the environment, "
                    "the backend options and the fingerprint. `mixboard run --lock FILE`, `Engine(..., lock=FILE)` "
                    "and mixboard inside vLLM ($MIXBOARD_LOCK) then reproduce it exactly, or fail saying what "
                    "differs (a plugin version, a missing backend, another device). `mixboard tune` writes one "
                    "from measurements instead.",
        epilog="examples:\n  mixboard lock ./my-hybrid                          this machine's choices -> mixboard.lock\n"
               "  mixboard lock ./my-hybrid --backend attention@decode=sdpa -o decode-sdpa.lock\n"
               "  mixboard lock ./my-hybrid --arch sm_90 -o h100.lock  the choices an H100 would get\n\n"
               + environment_flags.EPILOG, formatter_class=_raw())
    p.add_argument("model", nargs="?", default="demo", metavar="MODEL", help=MODEL_HELP)
    _add_common(p)
    environment_flags.add_flags(p, device=False)
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    p.add_argument("-o", "--output", default=None, metavar="FILE", help="where to write it (default: mixboard.lock)")
    p.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    p.add_argument("--json", action="store_true", help="print the lock's summary as JSON (stable contract)")
    p.set_defaults(run=cmd_lock)


def model_record(model, dtype: str, info) -> dict:
    return {"path": str(model), "model_type": info.model_type, "dtype": dtype}


def cmd_lock(args) -> int:
    from mixboard import get_registry
    from mixboard.errors import UsageError
    from mixboard.lock import DEFAULT_LOCK, lock_data, write_lock

    from .loader import build_model

    output = Path(args.output or DEFAULT_LOCK)
    if output.exists() and not args.force:
        raise UsageError(f"{output} exists: give --force to overwrite it, or -o another file")
    if output.parent and not output.parent.is_dir():
        raise UsageError(f"cannot write {output}: no folder {str(output.parent)!r}")
    model = build_model(args.model, args.dtype)
    env, notes = environment_flags.resolve(args)
    registry = get_registry()
    plan = registry.plan(model.layer_decls(), env, rule_flags.forced(args), rule_flags.preferred(args),
                         option_flags.given(args))
    data = lock_data(plan, model=model_record(args.model, args.dtype, model.info), made_by="mixboard lock")
    try:
        write_lock(output, data)
    except OSError as exc:
        raise UsageError(f"cannot write {output}: {exc.strerror or exc}") from None
    summary = {"path": str(output), "fingerprint": plan.fingerprint, "layers": len(plan.layers),
               "groups": len(data["groups"]), "split_by_phase": sum(1 for layer in plan.layers if layer.split)}
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    from .run_commands import print_plan

    print_plan(plan, verbose=False)
    for note in notes:
        print(f"  ({note})")
    print(f"\nwrote {output}: {summary['layers']} layers in {summary['groups']} groups, fingerprint "
          f"{plan.fingerprint}; reproduce it with `mixboard run {args.model} --lock {output}`")
    return 0
