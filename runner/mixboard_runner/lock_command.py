"""The ``lock`` command: plan a model without its weights and write the plan down (locking.py
plans with one)."""

from __future__ import annotations

import json
from pathlib import Path

from . import environment_flags, option_flags, rule_flags
from .run_commands import MODEL_HELP, _add_common, _raw, print_plan


def add_commands(commands) -> None:
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
    print_plan(plan, verbose=False)
    for note in notes:
        print(f"  ({note})")
    print(f"\nwrote {output}: {summary['layers']} layers in {summary['groups']} groups, fingerprint "
          f"{plan.fingerprint}; reproduce it with `mixboard run {args.model} --lock {output}`")
    return 0
