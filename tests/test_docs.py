"""docs/plugins.md is followed literally: its files are written, installed as
a real wheel, listed by the CLI as the page says, and run through the
conformance kit: ``acme_attn`` (plain PyTorch) passes every case here, and
``acme_attn_fused`` (a GPU library's wrapper) runs nothing, as the page shows."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import torch

from distfactory import install_doc_project

DOC = Path(__file__).parent.parent / "docs" / "plugins.md"
FILES = {"acme-mixboard/pyproject.toml", "acme-mixboard/acme_mixboard/plugin.py",
         "acme-mixboard/acme_mixboard/attention.py", "acme-mixboard/acme_mixboard/impl.py",
         "acme-mixboard/acme_mixboard/fused.py", "acme-mixboard/acme_mixboard/fused_impl.py"}


def test_vendor_quickstart_from_an_empty_folder(tmp_path):
    files, target = install_doc_project(DOC, tmp_path, "acme-mixboard")
    assert files == FILES
    env = {k: v for k, v in os.environ.items() if not k.startswith("MIXBOARD_")}
    env.update(PYTHONPATH=str(target), MIXBOARD_PLUGINS="acme")

    def run(*args):
        return subprocess.run([sys.executable, "-m", "mixboard_runner", *args], capture_output=True, text=True,
                              env=env, cwd=tmp_path)

    def cli(*args):
        out = run(*args)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    (plugin,) = [p for p in cli("plugins", "--json") if p["status"] != "disabled"]  # first-party ones are disabled
    assert plugin == {
        "name": "acme", "distribution": "acme-mixboard", "version": "0.1.0", "status": "ok", "error": None,
        "backends": ["acme_attn", "acme_attn_fused"], "kinds": [], "devices": []}

    listed = {b["name"]: b for b in cli("backends", "--kind", "attention", "--device", "cpu", "--json")}
    assert listed["acme_attn"]["available"] and listed["acme_attn"]["priority"] == 5
    assert listed["acme_attn_fused"]["reasons"] == [
        "runs on cuda; this environment is cpu",
        "needs Python module 'acme_kernels', which is not installed (pip install acme-kernels)"]
    listed = {b["name"]: b for b in cli("backends", "--kind", "attention", "--arch", "sm_80", "--json")}
    assert "needs compute capability 9.0 or newer; this GPU has 8.0" in listed["acme_attn_fused"]["reasons"]
    # an AMD GPU's capability-like number is no NVIDIA capability: the check does not misread it
    listed = {b["name"]: b for b in cli("backends", "--kind", "attention", "--arch", "gfx942", "--json")}
    assert not any("capability" in r for r in listed["acme_attn_fused"]["reasons"])
    chosen = cli("select", "attention", "--spec", "dtype=bfloat16", "--arch", "sm_90", "--json")
    assert chosen["chosen"] == "acme_attn"  # acme_attn_fused lacks acme_kernels even on a simulated H100

    # The impl of section 4 passes the kit in every dtype it declares, every case run (none skipped) but the
    # capture cases: it declares no capture (section 10).
    results = cli("check", "acme_attn", "--json")
    ran = [r for r in results if not r["case"].startswith("capture_")]
    assert ran and {r["status"] for r in ran} == {"pass"}, [r for r in ran if r["status"] != "pass"]
    assert {r["status"] for r in results if r not in ran} == {"skip"} and len(results) - len(ran) == 6
    assert {r["case"].split("[")[1] for r in results} == {"float32]", "bfloat16]", "float16]"}

    # Section 5's backend cannot run here: every case skipped, which is not a pass (exit 5), as the page shows.
    out = run("check", "acme_attn_fused")
    assert out.returncode == 5, out.stdout[-2000:] + out.stderr
    (shown,) = re.findall(r"^mixboard check: acme_attn_fused ran no case.*$", DOC.read_text(), re.M)
    (said,) = out.stderr.strip().splitlines()
    assert said.startswith("mixboard check: acme_attn_fused ran no case on cuda: all ")
    assert "needs Python module 'acme_kernels', which is not installed (pip install acme-kernels)" in said
    if not torch.cuda.is_available():  # the page shows a machine without a GPU
        assert re.sub(r"all \d+ were", "all N were", said) == re.sub(r"all \d+ were", "all N were", shown)
    assert run("check", "acme_attn_fused", "--allow-skip").returncode == 0
    # make_impl is where the library is imported: the declaration module never needs it.
    probe = subprocess.run([sys.executable, "-c", "import acme_mixboard.fused, acme_mixboard.fused_impl"],
                           capture_output=True, text=True, env=env)
    assert "No module named 'acme_kernels'" in probe.stderr and "fused_impl" in probe.stderr
