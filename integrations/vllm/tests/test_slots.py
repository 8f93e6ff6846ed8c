"""Slot-state models: mamba2 (vLLM runs it alone too) and Mamba1 (vLLM's CPU build cannot)."""

import json
import subprocess
import sys

from harness import ok, run
from hf_ids import hf_ids


def explain_fingerprint(path: str) -> str:
    out = subprocess.run([sys.executable, "-m", "mixboard_runner", "explain", path, "--json"], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)["mixer_fingerprint"]  # vLLM runs its own dense ops: mixboard plans the mixers


def test_mamba2_gives_vllm_native_ids(workdir, checkpoint, native):
    path = checkpoint("mamba2")
    r = ok(run(workdir, "mamba2", path))
    assert r.ids == native("mamba2")
    assert {kind for kind, _, _ in r.table.values()} == {"mamba2"} and len(r.table) == 2
    assert r.mixed_steps()
    # the same checkpoint planned by mixboard's own runner: same layer names, specs and backends
    assert list(r.fingerprints.values()) == [explain_fingerprint(path)]


def test_mamba1_runs_in_vllm_cpu_and_gives_transformers_ids(workdir, checkpoint):
    path = checkpoint("mamba")
    r = ok(run(workdir, "mamba1", path))
    assert r.ids == hf_ids(path)
    assert {kind for kind, _, _ in r.table.values()} == {"mamba1"}
    assert list(r.fingerprints.values()) == [explain_fingerprint(path)]
