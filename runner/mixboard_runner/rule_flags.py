"""The flags that steer selection, shared by select, explain and run:
``--backend`` forces (strict), ``--prefer`` prefers (used where it can
serve). Each defaults to its environment variable."""

from __future__ import annotations

import os

EPILOG = ("backend rules: --backend KIND=BACKEND or LAYER_PATTERN=BACKEND forces (the backend must serve those "
          "layers, or the command fails saying why);\n--prefer takes the same rules but only prefers: the backend "
          "wins where it can serve a layer and is passed over, with its reasons, where it cannot.")


def add_flags(p) -> None:
    p.add_argument("--backend", default=None, metavar="RULES",
                   help="force backends: KIND=BACKEND or LAYER_PATTERN=BACKEND, comma separated "
                        "(default: $MIXBOARD_BACKEND)")
    p.add_argument("--prefer", default=None, metavar="RULES",
                   help="prefer backends where they can serve, whatever their priority: the same rules as --backend, "
                        "several for one target tried in order (default: $MIXBOARD_PREFER)")


def forced(args) -> str | None:
    return args.backend if args.backend is not None else os.environ.get("MIXBOARD_BACKEND")


def preferred(args) -> str | None:
    return args.prefer if args.prefer is not None else os.environ.get("MIXBOARD_PREFER")
