"""docs/conformance.md is followed literally: its files are written into an
empty folder, installed into a fresh target, and its commands give what
the page says (pytest's count, `mixboard check` passing with the skips the
backend's own check() asks for)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).parents[2] / "docs" / "conformance.md"


def doc_files() -> dict[str, str]:
    return dict(re.findall(r"File `([^`]+)`:\n\n```[a-z]*\n(.*?)```", DOC.read_text(), flags=re.S))


def test_from_an_empty_folder_to_mixboard_check_passing(tmp_path):
    files = doc_files()
    assert set(files) == {"acme-shortconv/pyproject.toml", "acme-shortconv/acme_shortconv/plugin.py",
                          "acme-shortconv/acme_shortconv/backend.py", "acme-shortconv/acme_shortconv/impl.py",
                          "acme-shortconv/tests/test_conformance.py"}
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(tmp_path / "acme-shortconv")], check=True)
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
