"""The vLLM versions this integration is written against (compat.py holds every private detail)."""

from __future__ import annotations

import re

SUPPORTED = ">=0.32,<0.33"
_LOW, _HIGH = (0, 32), (0, 33)  # [low, high) on (major, minor)


def supported(version: str) -> bool:
    m = re.match(r"(\d+)\.(\d+)", version)
    return bool(m) and _LOW <= (int(m.group(1)), int(m.group(2))) < _HIGH
