"""The flags that steer selection, shared by select, explain and run:
``--backend`` forces (strict), ``--prefer`` prefers (used where it can
serve). Each defaults to its environment variable."""

from __future__ import annotations

import os

EPILOG = ("backend rules: --backend KIND=BACKEND or LAYER_PATTERN=BACKEND forces (the backend must serve those "
          "layers, or the command fails saying why);\n--prefer takes the same rules but only prefers: the backend "
          "wins where it can serve a layer and is passed over, with its reasons, where it cannot.\n"
          "A rule may name a phase: attention@decode=sdpa runs attention's decode rows on sdpa and leaves "
          "its prefill rows\nto their own choice (both phases of a layer must keep its state in one layout).")


def add_flags(p) -> None:
    p.add_argument("--backend", default=None, metavar="RULES",
                   help="force backends: KIND=BACKEND or LAYER_PATTERN=BACKEND, comma separated, a target "
                        "optionally @prefill or @decode (default: $MIXBOARD_BACKEND)")
    p.add_argument("--prefer", default=None, metavar="RULES",
                   help="prefer backends where they can serve, whatever their priority: the same rules as --backend, "
                        "several for one target tried in order (default: $MIXBOARD_PREFER)")


def forced(args) -> str | None:
    return args.backend if args.backend is not None else os.environ.get("MIXBOARD_BACKEND")


def preferred(args) -> str | None:
    return args.prefer if args.prefer is not None else os.environ.get("MIXBOARD_PREFER")
