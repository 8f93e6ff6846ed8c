"""Real distributions for tests: a ``*.dist-info`` folder (METADATA and
entry_points.txt) beside the plugin's modules, in a folder put on sys.path.
importlib.metadata finds them exactly as it finds pip-installed packages."""

from __future__ import annotations

import sys
import textwrap
from importlib import metadata
from pathlib import Path


def write_distribution(root: Path, name: str, version: str = "1.0",
                       entry_points: dict[str, str] | None = None,
                       files: dict[str, str] | None = None) -> Path:
    """Write distribution ``name`` into ``root``. ``entry_points`` maps
    entry-point names (group ``mixboard``) to module paths; ``files`` maps
    relative paths to source text."""
    root.mkdir(parents=True, exist_ok=True)
    info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = ["[mixboard]"] + [f"{ep} = {target}" for ep, target in (entry_points or {}).items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    for rel, text in (files or {}).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return info


def entry_points_from(root: Path) -> list[metadata.EntryPoint]:
    """The ``mixboard`` entry points of the distributions under ``root`` only."""
    eps = []
    for dist in metadata.distributions(path=[str(root)]):
        eps.extend(ep for ep in dist.entry_points if ep.group == "mixboard")
    return eps


def forget_modules(*prefixes: str) -> None:
    for name in list(sys.modules):
        if name.split(".")[0] in prefixes:
            del sys.modules[name]
