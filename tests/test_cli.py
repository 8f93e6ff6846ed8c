"""The CLI through a subprocess, against a real wheel installed into a
temporary target and a broken distribution beside it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from distfactory import write_distribution

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(HERE / "distributions" / "toys")], check=True)
    write_distribution(target, "broken-vendor", "0.1", {"broken": "broken_vendor"},
                       {"broken_vendor.py": "import vendor_runtime_that_is_missing\n"})
    return target


def mixboard(site, *args, env=None):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MIXBOARD_")}
    environ.update({"PYTHONPATH": str(site), "MIXBOARD_PLUGINS": "toys,broken"}, **(env or {}))
    return subprocess.run([sys.executable, "-m", "mixboard_runner", *args], capture_output=True, text=True, env=environ)


def test_plugins_json_contract(site):
    out = mixboard(site, "plugins", "--json")
    assert out.returncode == 0, out.stderr
    records = {r["name"]: r for r in json.loads(out.stdout)}
    assert records["toys"] == {"name": "toys", "distribution": "mixboard-toys", "version": "0.3.0", "status": "ok",
                               "error": None, "backends": ["toy_attention", "toy_cuda_attention", "toy_short_conv"],
                               "kinds": [], "devices": []}
    broken = records["broken"]
    assert broken["status"] == "error" and broken["distribution"] == "broken-vendor"
    assert "vendor_runtime_that_is_missing" in broken["error"]


def test_plugins_text_shows_the_fault(site):
    out = mixboard(site, "plugins")
    assert out.returncode == 0
    assert "mixboard-toys" in out.stdout and "broken: import of 'broken_vendor' failed" in out.stdout


def test_backends_json_contract_and_reasons(site):
    out = mixboard(site, "backends", "--json", "--device", "cpu")
    assert out.returncode == 0, out.stderr
    rows = {b["name"]: b for b in json.loads(out.stdout)}
    assert set(rows) == {"toy_attention", "toy_cuda_attention", "toy_short_conv"}
    assert rows["toy_attention"] == {
        "name": "toy_attention", "kind": "attention", "plugin": "toys", "distribution": "mixboard-toys",
        "version": "0.3.0", "priority": 1, "devices": ["*"], "dtypes": ["float32", "bfloat16"],
        "available": True, "reasons": [], "environment": rows["toy_attention"]["environment"],
        "options": [], "capture": "never"}
    assert {b["environment"]["device"] for b in rows.values()} == {"cpu"}
    assert rows["toy_cuda_attention"]["available"] is False
    assert rows["toy_cuda_attention"]["reasons"] == [
        "runs on cuda; this environment is cpu",
        "needs Python module 'toy_missing_kernels', which is not installed (pip install toy-missing-kernels)"]
    out = mixboard(site, "backends", "--json", "--kind", "short_conv", "--capability", "7.5")
    assert [b["name"] for b in json.loads(out.stdout)] == ["toy_short_conv"]


def test_select_json_contract(site):
    out = mixboard(site, "select", "attention", "--spec", "num_heads=16,num_kv_heads=4", "--device", "cpu", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["kind"] == "attention" and data["chosen"] == "toy_attention"
    assert data["spec"]["num_heads"] == 16 and data["spec"]["head_size"] == 64  # defaults fill the rest
    assert data["environment"]["device"] == "cpu"
    assert [c["name"] for c in data["candidates"]] == ["toy_attention", "toy_cuda_attention"]
    assert data["candidates"][1]["available"] is False and data["candidates"][1]["reasons"]


def test_select_strict_override_that_cannot_serve_exits_1_with_reasons(site):
    out = mixboard(site, "select", "attention", "--backend", "attention=toy_cuda_attention", "--device", "cpu")
    assert out.returncode == 1
    assert "forced by rule 'attention=toy_cuda_attention'" in out.stderr and "runs on cuda" in out.stderr
    assert "Traceback" not in out.stderr
    # the same through the environment variable, as JSON
    out = mixboard(site, "select", "attention", "--device", "cpu", "--json",
                   env={"MIXBOARD_BACKEND": "attention=toy_cuda_attention"})
    assert out.returncode == 1 and json.loads(out.stdout)["chosen"] is None


def test_select_text_output(site):
    out = mixboard(site, "select", "attention", "--device", "cuda", "--capability", "7.0")
    assert out.returncode == 0
    assert out.stdout.startswith("attention -> toy_attention")
    assert "needs compute capability >= 8.0, this GPU has 7.0" in out.stdout


@pytest.mark.parametrize("args, message", [
    (["select", "attn"], "unknown kind 'attn'; kinds are argmax, attention, embedding, linear, mamba1, mamba2, moe, rms_norm, rotary, short_conv"),
    (["select", "attention", "--spec", "heads=4"], "unknown spec field 'heads'"),
    (["select", "attention", "--spec", "num_heads=x"], "takes int, not 'x'"),
    (["select", "attention", "--spec", "num_heads"], "bad --spec item 'num_heads'"),
    (["select", "attention", "--backend", "attention"], "bad backend rule 'attention'"),
    (["select", "attention", "--backend", "attention=nope"], "unknown backend 'nope'"),
    (["select", "attention", "--backend", "attention=toy_short_conv"], "serves short_conv"),
    (["backends", "--capability", "nine"], "bad capability 'nine'"),
    (["backends", "--device", "gpu"], "unknown device 'gpu'"),
    (["backends", "--kind", "nope"], "unknown kind 'nope'"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["select"], "the following arguments are required: KIND"),
])
def test_bad_input_is_one_line_and_exit_2(site, args, message):
    out = mixboard(site, *args)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert message in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("command", [[], ["plugins"], ["backends"], ["select"]])
def test_every_command_has_help(site, command):
    out = mixboard(site, *command, "--help")
    assert out.returncode == 0 and "usage: mixboard" in out.stdout


def test_strict_plugins_makes_the_fault_an_error(site):
    out = mixboard(site, "plugins", env={"MIXBOARD_STRICT_PLUGINS": "1"})
    assert out.returncode == 1 and "vendor_runtime_that_is_missing" in out.stderr


def test_a_command_prints_no_warning_of_torch_without_numpy():
    # numpy is a dependency of mixboard itself (not only of the tests): without it torch warns on import
    from importlib.metadata import requires

    assert any(r.split(";")[0].strip() == "numpy" for r in requires("mixboard"))
    out = subprocess.run([sys.executable, "-m", "mixboard_runner", "backends"], capture_output=True, text=True)
    assert out.returncode == 0 and "NumPy" not in out.stderr, out.stderr
