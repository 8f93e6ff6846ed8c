"""docs/conformance.md is followed literally: its files are written into an
empty folder, installed into a fresh target, and its commands give what
the page says: for the short_conv backend of section 1, pytest's count and
`mixboard check` passing with the skips the backend's own check() asks for;
for the kind a plugin defines in section 5 (``ema``, its oracle, adapter,
backend and impl), its suite and `mixboard check` passing every case."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from distfactory import install_doc_project

DOC = Path(__file__).parents[2] / "docs" / "conformance.md"


def _env(site: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MIXBOARD_")}
    env["PYTHONPATH"] = str(site)
    return env


def _start(cwd: Path, env: dict, *args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *args], cwd=cwd, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def test_from_an_empty_folder_to_mixboard_check_passing(tmp_path):
    files, target = install_doc_project(DOC, tmp_path, "acme-shortconv")
    assert {f for f in files if f.startswith("acme-shortconv/")} == {
        "acme-shortconv/pyproject.toml", "acme-shortconv/acme_shortconv/plugin.py",
        "acme-shortconv/acme_shortconv/backend.py", "acme-shortconv/acme_shortconv/impl.py",
        "acme-shortconv/tests/test_conformance.py"}
    env = _env(target)
    tests = _start(tmp_path / "acme-shortconv", env, "-m", "pytest", "-q", "-p", "no:cacheprovider")
    check = _start(tmp_path / "acme-shortconv", env, "-m", "mixboard_runner", "check", "acme_short_conv", "--json")
    out, err = tests.communicate(timeout=300)
    assert tests.returncode == 0, out[-3000:] + err
    (count,) = re.findall(r"python -m pytest -q +# (\d+ passed, \d+ skipped)", DOC.read_text())
    assert count in out  # the count the page gives
    out, err = check.communicate(timeout=300)
    assert check.returncode == 0, out[-3000:] + err
    results = {r["case"]: r for r in json.loads(out)}
    skipped = {case for case, r in results.items() if r["status"] == "skip"}
    capture = {f"capture_{c}[{d}]" for c in ("decode", "mixed") for d in ("float32", "bfloat16")}
    assert skipped == {"shape-width6[float32]", "shape-width6[bfloat16]"} | capture
    assert results["shape-width6[float32]"]["reason"] == "conv_width 6 is above 4, the widest ACME supports"
    assert results["capture_decode[float32]"]["reason"].startswith("declares capture='never' (the default)")
    assert {r["status"] for case, r in results.items() if case not in skipped} == {"pass"}
    assert results["chunked_prefill[bfloat16]"]["tolerance"] == 5e-2


def test_a_kind_the_plugin_defines_from_an_empty_folder(tmp_path):
    files, target = install_doc_project(DOC, tmp_path, "acme-ema")
    assert {f for f in files if f.startswith("acme-ema/")} == {
        "acme-ema/pyproject.toml", "acme-ema/acme_ema/kind.py", "acme-ema/acme_ema/oracle.py",
        "acme-ema/acme_ema/conformance.py", "acme-ema/acme_ema/backend.py", "acme-ema/acme_ema/impl.py",
        "acme-ema/acme_ema/plugin.py", "acme-ema/tests/test_conformance.py"}
    env = _env(target)
    project = tmp_path / "acme-ema"
    tests = _start(project, env, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs")
    check = _start(project, env, "-m", "mixboard_runner", "check", "acme_ema", "--json")
    select = subprocess.run([sys.executable, "-m", "mixboard_runner", "select", "ema"], cwd=project, env=env,
                            capture_output=True, text=True)
    assert select.returncode == 0, select.stderr
    assert select.stdout.startswith("ema -> acme_ema\n")  # as the page's comment says
    out, err = tests.communicate(timeout=300)
    assert tests.returncode == 0, out[-3000:] + err
    # nothing failed, nothing skipped but the capture cases in both dtypes: it declares no capture
    assert re.search(r"^\d+ passed, 4 skipped in ", out.splitlines()[-1]), out[-500:]
    out, err = check.communicate(timeout=300)
    assert check.returncode == 0, out[-3000:] + err
    results = json.loads(out)
    assert {r["status"] for r in results if not r["case"].startswith("capture_")} == {"pass"}
    assert {"shape-wide[float32]", "shape-wide[bfloat16]", "chunked_prefill[float32]"} <= {r["case"] for r in results}
