"""Real distributions for tests: a ``*.dist-info`` folder (METADATA and
entry_points.txt) beside the plugin's modules, in a folder put on sys.path.
importlib.metadata finds them exactly as it finds pip-installed packages."""

from __future__ import annotations

import re
import subprocess
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


def install_doc_project(doc: Path, into: Path, project: str) -> tuple[set[str], Path]:
    """Write every "File `path`:" block of ``doc`` under ``into`` and
    pip-install the folder ``project`` from there into ``into / "site"``, as a
    reader following the doc would. Returns (the files' paths, the site folder)."""
    files = dict(re.findall(r"File `([^`]+)`:\n\n```[a-z]*\n(.*?)```", doc.read_text(), flags=re.S))
    for rel, text in files.items():
        (into / rel).parent.mkdir(parents=True, exist_ok=True)
        (into / rel).write_text(text)
    site = into / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(site), str(into / project)], check=True)
    return set(files), site
