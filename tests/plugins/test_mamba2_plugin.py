"""The mixboard-mamba2 distribution as installed: its entry point, what its
import costs, and what the CLI says about its backends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

SITE = Path(__file__).parent / "doubles" / "mamba2" / "site"


def _installed() -> bool:
    try:
        metadata.distribution("mixboard-mamba2")
    except metadata.PackageNotFoundError:
        return False
    return True


pytestmark = pytest.mark.skipif(not _installed(), reason="mixboard-mamba2 is not installed")


def run(args: list[str], extra_path: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MIXBOARD_")}
    if extra_path is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(extra_path), env.get("PYTHONPATH", "")])
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=120)


def test_the_entry_point_registers_its_three_backends_from_the_distribution():
    from mixboard.plugins import load

    eps = [ep for ep in metadata.entry_points(group="mixboard") if ep.name == "mamba2"]
    assert [ep.value for ep in eps] == ["mixboard_mamba2.plugin"]
    loaded = load(eps)
    (record,) = loaded.plugins
    assert (record.name, record.distribution, record.version, record.status) == (
        "mamba2", "mixboard-mamba2", "0.1.0", "ok")
    assert sorted(record.backends) == ["mamba2_cpu", "mamba2_torch", "mamba2_triton"]
    assert {loaded.backends[n].cls.kind for n in record.backends} == {"mamba2"}


def test_importing_the_plugin_imports_neither_torch_nor_the_kernels():
    code = ("import sys, mixboard_mamba2.plugin as p; p.mixboard_backends(); "
            "print(sorted(m for m in ('torch', 'mamba_ssm', 'triton') if m in sys.modules))")
    out = run([sys.executable, "-c", code])
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_backends_listing_says_why_mamba2_triton_is_unavailable_here():
    out = run([sys.executable, "-m", "mixboard_runner", "backends", "--kind", "mamba2", "--json"])
    assert out.returncode == 0, out.stderr
    rows = {row["name"]: row for row in json.loads(out.stdout)}
    assert rows["mamba2_torch"]["available"] is True
    reasons = " ".join(rows["mamba2_triton"]["reasons"])
    assert "runs on cpu only under Triton's interpreter (TRITON_INTERPRET=1)" in reasons
    if "mamba_ssm" not in sys.modules:
        assert "'mamba_ssm'" in reasons and "not installed" in reasons and "mixboard-mamba2[triton]" in reasons


def test_select_on_a_simulated_h100_chooses_mamba2_triton_when_the_kernels_are_found():
    args = [sys.executable, "-m", "mixboard_runner", "select", "mamba2", "--device", "cuda", "--capability", "9.0",
            "--spec", "dtype=bfloat16"]
    out = run(args, extra_path=SITE)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "mamba2 -> mamba2_triton"



def test_mamba2_triton_refuses_a_half_precision_state_in_the_interpreter(monkeypatch):
    """The interpreter's half-precision results are wrong: a float32 layer keeping its state in
    bfloat16 would pass a check of the layer's dtype alone."""
    from mixboard import Mamba2Spec, simulate
    from mixboard_mamba2.triton_backend import Mamba2Triton

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert Mamba2Triton.check(Mamba2Spec(dtype="float32"), simulate("cpu")) == []
    assert Mamba2Triton.check(Mamba2Spec(dtype="float32", state_dtype="bfloat16"), simulate("cpu")) == [
        "Triton's interpreter (TRITON_INTERPRET=1) gives wrong bfloat16 results; float32 only there"]
