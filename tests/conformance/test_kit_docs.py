"""docs/conformance.md is followed literally: its files are written into an
empty folder, installed into a fresh target, and its commands give what
the page says (pytest's count, `mixboard check` passing with the skips the
backend's own check() asks for)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from distfactory import install_doc_project

DOC = Path(__file__).parents[2] / "docs" / "conformance.md"


def test_from_an_empty_folder_to_mixboard_check_passing(tmp_path):
    files, target = install_doc_project(DOC, tmp_path, "acme-shortconv")
    assert files == {"acme-shortconv/pyproject.toml", "acme-shortconv/acme_shortconv/plugin.py",
                     "acme-shortconv/acme_shortconv/backend.py", "acme-shortconv/acme_shortconv/impl.py",
                     "acme-shortconv/tests/test_conformance.py"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("MIXBOARD_")}
    env["PYTHONPATH"] = str(target)

    def start(*args):
        return subprocess.Popen([sys.executable, *args], cwd=tmp_path / "acme-shortconv", env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    tests = start("-m", "pytest", "-q", "-p", "no:cacheprovider")
    check = start("-m", "mixboard_runner", "check", "acme_short_conv", "--json")
    out, err = tests.communicate(timeout=300)
    assert tests.returncode == 0, out[-3000:] + err
    assert "27 passed, 2 skipped" in out  # the count the page gives
    out, err = check.communicate(timeout=300)
    assert check.returncode == 0, out[-3000:] + err
    results = {r["case"]: r for r in json.loads(out)}
    skipped = {case for case, r in results.items() if r["status"] == "skip"}
    assert skipped == {"shape-width6[float32]", "shape-width6[bfloat16]"}
    assert results["shape-width6[float32]"]["reason"] == "conv_width 6 is above 4, the widest ACME supports"
    assert {r["status"] for case, r in results.items() if case not in skipped} == {"pass"}
    assert results["chunked_prefill[bfloat16]"]["tolerance"] == 5e-2
