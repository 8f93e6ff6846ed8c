"""The kit's two modes, and how a whole run asks for the thorough one.

quick (the default): every case at small sizes, plus the cheap ones at
real sizes (40 sequences in a step, the head sizes real models use, block
sizes other than the suite's, a 300-token prompt), in seconds per backend.

thorough: the quick cases and the long ones (prompts of 2500 and 4096
tokens, 40 steps of decodes after 1000 tokens, 96 sequences in a step, the
kind's long shapes), in minutes.

Asked for by ``mixboard check --thorough``, ``pytest --mixboard-thorough``,
``thorough = True`` on a suite class, ``run_suite(..., thorough=True)``, or
for every one of these at once by ``MIXBOARD_THOROUGH=1`` (any value but
empty or ``0``), as a nightly CI job would set it.
"""

from __future__ import annotations

import os

ENV_VAR = "MIXBOARD_THOROUGH"


def thorough_from_env() -> bool:
    return os.environ.get(ENV_VAR, "") not in ("", "0")


def is_thorough(asked: bool | None) -> bool:
    """What a caller asked for, or the environment's choice when it asked nothing (None)."""
    return thorough_from_env() if asked is None else bool(asked)
