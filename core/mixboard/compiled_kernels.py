"""Whether a plugin's compiled kernel can serve: built, and built from the source beside it.

Plugins build their C kernels at install, optionally: where no C compiler is found a kernel is absent
and the plugin's portable backend serves instead, the reason listed. An editable install builds module
``_x`` from ``_x.c`` beside it; a pull that changes the source without a reinstall leaves the old build,
whose entry points may no longer match the Python that calls them, so a build older than its source is
refused the same way, and so is one older than a file its source includes (``#include "..."``, followed
through included sources): found beside the source, or in the nearest ``include`` folder above it, where
the plugins' shared headers live (plugins/include). Reads the file system only: imports neither torch
nor the kernel.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

# every quoted include, whatever #if it sits under: a build may be held to a header it did not read
# (sdpa's float32 build to mixboard_bf16.h), never the other way round
_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)
_SHARED_LEVELS = 4  # plugins/<plugin>/src/<package>/_x.c: plugins/include is 4 folders up


def kernel_unusable(module: str, includes: tuple[str, ...] = ()) -> str | None:
    """Why the compiled kernel ``module`` cannot serve, worded to follow "its compiled kernel <module>"
    ("is not built", or built before its source changed); None when it can. ``includes``: the names
    of other sources beside it that its source includes, held to the build the same way."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        return "is not built"
    built = Path(spec.origin)
    own = built.with_name(module.rpartition(".")[2] + ".c")
    for source in _included([own, *map(built.with_name, includes)]):
        try:
            stale = source.stat().st_mtime > built.stat().st_mtime
        except OSError:  # not there (an installed wheel ships no headers): nothing to compare with
            continue
        if stale:
            return f"was built before its source {source.name} last changed"
    return None


def _included(sources: list[Path]) -> list[Path]:
    """``sources`` and every file they include by a quoted name, transitively, each once, in order."""
    found: list[Path] = []
    todo = list(sources)
    while todo:
        source = todo.pop(0)
        if source in found:
            continue
        found.append(source)
        try:
            text = source.read_text(errors="replace")
        except OSError:
            continue
        for name in _INCLUDE.findall(text):
            path = _resolve(source, name)
            if path is not None:
                todo.append(path)
    return found


def _resolve(source: Path, name: str) -> Path | None:
    """Where the compiler found ``name`` for ``source``: beside it, else in the nearest include folder above."""
    if Path(name).is_absolute():
        return None
    beside = source.parent / name
    if beside.exists():
        return beside
    for folder in list(source.parents)[:_SHARED_LEVELS]:
        shared = folder / "include" / name
        if shared.exists():
            return shared
    return None
