"""Whether a plugin's compiled kernel can serve: built, and built from the source beside it.

Plugins build their C kernels at install, optionally: where no C compiler is found a kernel is absent
and the plugin's portable backend serves instead, the reason listed. An editable install builds module
``_x`` from ``_x.c`` beside it; a pull that changes the source without a reinstall leaves the old build,
whose entry points may no longer match the Python that calls them, so a build older than its source is
refused the same way. Reads the file system only: imports neither torch nor the kernel.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path


def kernel_unusable(module: str, includes: tuple[str, ...] = ()) -> str | None:
    """Why the compiled kernel ``module`` cannot serve, worded to follow "its compiled kernel <module>"
    ("is not built", or built before its source changed); None when it can. ``includes``: the names
    of other sources beside it that its source includes, held to the build the same way."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        return "is not built"
    built = Path(spec.origin)
    for source in [built.with_name(module.rpartition(".")[2] + ".c"), *map(built.with_name, includes)]:
        try:
            stale = source.stat().st_mtime > built.stat().st_mtime
        except OSError:  # an installed wheel ships its build alone: nothing to compare with
            continue
        if stale:
            return f"was built before its source {source.name} last changed"
    return None
