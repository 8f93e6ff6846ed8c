"""examples/acme_plugin as a vendor ships it: installed from its folder into
a fresh target (never into this environment), found through its entry
point, passing its own conformance tests and `mixboard check`, and serving
the demo model when forced."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).parents[2] / "examples" / "acme_plugin"


@pytest.fixture(scope="module")
def acme(tmp_path_factory):
    """(the installed target, a copy of the example's source): installing from a
    copy keeps the build's leftovers out of the repository."""
    root = tmp_path_factory.mktemp("acme")
    source = root / "acme_plugin"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    target = root / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(source)], check=True)
    return target, source


def start(target, *args, cwd=None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MIXBOARD_")}  # every plugin loads
    env["PYTHONPATH"] = str(target)
    return subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=cwd)


def finish(process: subprocess.Popen) -> subprocess.CompletedProcess:
    stdout, stderr = process.communicate(timeout=300)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def run(target, *args, cwd=None) -> subprocess.CompletedProcess:
    return finish(start(target, *args, cwd=cwd))


def test_its_own_conformance_tests_pass(acme):
    target, source = acme
    out = run(target, "-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=source)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    # 27 quick cases of the attention suite in each of its two dtypes; the two capture cases skipped in each:
    # it declares capture = "never"
    assert "54 passed, 4 skipped" in out.stdout, out.stdout[-500:]


def test_mixboard_check_passes_and_lists_the_plugin(acme):
    target, _ = acme
    plugins = start(target, "-m", "mixboard_runner", "plugins", "--json")
    check = start(target, "-m", "mixboard_runner", "check", "acme_attn", "--dtype", "float16", "--json")
    (record,) = [p for p in json.loads(finish(plugins).stdout) if p["name"] == "acme"]
    assert record["distribution"] == "acme-mixboard" and record["status"] == "ok"
    assert record["backends"] == ["acme_attn"]
    out = finish(check)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr
    results = json.loads(out.stdout)
    assert len(results) == 29 and {r["status"] for r in results if not r["case"].startswith("capture_")} == {"pass"}
    assert {r["status"] for r in results if r["case"].startswith("capture_")} == {"skip"}
    assert all(r["tolerance"] == 4e-3 for r in results)  # the backend's own declaration, not the kit's default


def test_the_demo_model_with_acme_forced_writes_what_sdpa_writes(acme):
    target, _ = acme

    def generate(backend):  # three prompts of different lengths: a ragged batch
        return start(target, "-m", "mixboard_runner", "run", "--backend", f"attention={backend}", "--max-tokens", "4",
                     "--json", "--prompt", "The mixers of a hybrid model", "--prompt", "acme", "--prompt", "hi")

    def outputs(process, backend):
        out = finish(process)
        assert out.returncode == 0, out.stderr
        data = json.loads(out.stdout)
        chosen = {layer["backend"] for layer in data["plan"]["layers"] if layer["kind"] == "attention"}
        assert chosen == {backend}
        return [o["output_ids"] for o in data["outputs"]]

    acme_run, sdpa_run = generate("acme_attn"), generate("sdpa")  # side by side: two cores
    assert outputs(acme_run, "acme_attn") == outputs(sdpa_run, "sdpa")
