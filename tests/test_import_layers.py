"""The import contracts of .importlinter hold (layers: integrations, then the runner and each plugin,
then core; no cycle inside any package), checked by import-linter, and they cover every package
the repository ships."""

import configparser
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent
# where each distribution keeps its package; the integration and the example are not in the dev venv,
# import-linter reads their sources from here (it never imports them)
SOURCE_DIRS = ["core", "runner", *(str(p.relative_to(ROOT)) for p in sorted(ROOT.glob("*/*/src")))]


def contract():
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    return config


def test_every_package_of_the_repository_is_under_contract():
    shipped = {p.parent.name for d in SOURCE_DIRS for p in (ROOT / d).glob("*/__init__.py")}
    config = contract()
    roots = set(config["importlinter"]["root_packages"].split())
    assert roots == shipped, "list a new package in .importlinter's root_packages, its layer and its ancestors"
    assert set(config["importlinter:contract:acyclic"]["ancestors"].split()) == shipped
    layered = {p.strip() for line in config["importlinter:contract:layers"]["layers"].split("\n")
               for p in line.split("|") if p.strip()}
    assert layered == shipped


def test_the_import_contracts_hold():
    lint = Path(sys.executable).with_name("lint-imports")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(ROOT / d) for d in SOURCE_DIRS)}
    r = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "Contracts: 2 kept, 0 broken." in r.stdout


def test_the_readmes_layout_picture_draws_the_contract():
    readme = (ROOT / "README.md").read_text()
    picture = readme.split("## Layout", 1)[1].split("```")[1]
    rows = [line.split()[1] for line in picture.splitlines() if line.strip() and not line.startswith("─")]
    layers = [[p.strip() for p in line.split("|")] for line in
              contract()["importlinter:contract:layers"]["layers"].strip().splitlines()]
    assert [rows[:1], sorted(rows[1:-1]), rows[-1:]] == [layers[0], sorted(layers[1]), layers[2]]
