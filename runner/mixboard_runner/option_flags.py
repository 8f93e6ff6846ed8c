"""``--backend-option BACKEND.OPTION=VALUE``: set a backend's options (run, explain, check).

Repeatable, and each may hold several, comma separated. Given, the flag
replaces ``$MIXBOARD_BACKEND_OPTIONS`` (as ``--backend`` replaces
``$MIXBOARD_BACKEND``); ``check`` reads the flag alone (a check names what
it checks)."""

from __future__ import annotations

import os

VARIABLE = "MIXBOARD_BACKEND_OPTIONS"


def add_flag(p, environment: bool = True) -> None:
    default = f" (default: ${VARIABLE})" if environment else ""
    p.add_argument("--backend-option", action="append", default=None, metavar="BACKEND.OPTION=VALUE",
                   help=f"set a backend's option, e.g. linear_onednn.layout=as_loaded (repeat, or comma separate; "
                        f"`mixboard backends NAME` lists a backend's options){default}")


def given(args, environment: bool = True) -> str | None:
    """The options as text, from the flag or else (``environment``) the variable; None if neither."""
    if args.backend_option is not None:
        return ",".join(args.backend_option)
    return os.environ.get(VARIABLE) if environment else None


def text(options) -> str:
    """{backend: {option: value}} as the flag takes it: ``sdpa.decode_chunk_mib=64, ...``."""
    return ", ".join(f"{b}.{o}={str(v).lower() if isinstance(v, bool) else v}"
                     for b, values in options.items() for o, v in values.items())
