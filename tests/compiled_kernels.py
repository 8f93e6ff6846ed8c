"""The tree's compiled kernels, and ``MIXBOARD_REQUIRE_KERNELS``.

Every kernel builds optionally (its setup.py says ``optional=True``), so a
machine without a C compiler still installs everything and the tests of a
kernel that is not built skip. In CI that would hide a broken build: with
``MIXBOARD_REQUIRE_KERNELS=1`` (set by the README's test command, which
.ci/run runs) the test run stops before any test, in one line naming every
kernel that is not built.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from mixboard.compiled_kernels import kernel_unusable

ROOT = Path(__file__).parent.parent
VARIABLE = "MIXBOARD_REQUIRE_KERNELS"


def kernels() -> dict[str, Path]:
    """Module name -> the plugin folder whose setup.py builds it (the root
    distribution is pure Python)."""
    found = {}
    for setup in ROOT.glob("plugins/*/setup.py"):
        for module in re.findall(r"Extension\(\s*[\"']([\w.]+)[\"']", setup.read_text()):
            found[module] = setup.parent
    return dict(sorted(found.items()))


def required() -> bool:
    return os.environ.get(VARIABLE, "") not in ("", "0")


def missing_kernels_line() -> str | None:
    """One line naming every kernel that is not built (or was built before its source changed) and how
    to build it; None when all are."""
    missing = {m: d for m, d in kernels().items() if kernel_unusable(m)}
    if not missing:
        return None
    how = "; ".join(f"{m} (pip install -e {d.relative_to(ROOT).as_posix()})" for m, d in missing.items())
    return (f"{VARIABLE} is set and compiled kernels are not built or older than their sources: {how}; "
            "each builds where gcc with OpenMP is present, and pip -v shows why a build failed")
