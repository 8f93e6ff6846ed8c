"""Planning with a lock file (``mixboard.lock``); lock_command.py is the ``lock`` command that writes one.

With a lock, every layer's backends are the lock's, or nothing runs: what
keeps the lock from being reproduced here (a backend not installed, another
plugin version, another device) is checked before planning and reported in
one message; rules (``--backend``, ``--prefer``) cannot be combined with it.
"""

from __future__ import annotations

import os


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
