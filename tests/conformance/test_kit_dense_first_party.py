"""The dense kinds' suites, as a vendor uses them: mixboard's own portable
backends pass in every dtype they declare, the suites are found from each
kind's declaration, and the kit reaches them all three ways."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mixboard.kinds import DENSE_KINDS
from mixboard.testing.conformance import (
    OP_ADAPTERS, ArgmaxConformance, EmbeddingConformance, LinearConformance, MoEConformance, OpAdapter,
    RMSNormConformance, RotaryConformance, adapter_of, run_suite,
)


class TestLinearTorch(LinearConformance):
    backend = "linear_torch"
    device = "cpu"


class TestRMSNormTorch(RMSNormConformance):
    backend = "rms_norm_torch"
    device = "cpu"


class TestRotaryTorch(RotaryConformance):
    backend = "rotary_torch"
    device = "cpu"


class TestEmbeddingTorch(EmbeddingConformance):
    backend = "embedding_torch"
    device = "cpu"


class TestArgmaxTorch(ArgmaxConformance):
    backend = "argmax_torch"
    device = "cpu"


class TestMoETorch(MoEConformance):
    backend = "moe_torch"
    device = "cpu"


@pytest.mark.parametrize("kind", DENSE_KINDS, ids=lambda k: k.name)
def test_each_dense_kind_declares_its_adapter(kind):
    adapter = adapter_of(kind)
    assert isinstance(adapter, OpAdapter) and adapter is OP_ADAPTERS[kind.name]


def test_the_cases_are_the_documented_ones():
    names = [r.case for r in run_suite("rotary_torch", "cpu", ("float32",)).results]
    assert names[:3] == ["rows[float32]", "noncontiguous[float32]", "interleaved[float32]"]
    assert "shape-llama3_scaling[float32]" in names and not any(n.startswith("long-") for n in names)
    thorough = [r.case for r in run_suite("argmax_torch", "cpu", ("float32",), thorough=True).results]
    assert "long-vocab152064[float32]" in thorough


def test_a_dense_backend_in_a_mixer_suite_is_one_clear_failure():
    from mixboard.testing.conformance import AttentionConformance

    class Wrong(AttentionConformance):
        backend = "linear_torch"

    (unusable,) = Wrong.conformance_cases()
    assert "serves linear, not attention" in unusable.message


def test_mixboard_check_runs_a_dense_backend():
    done = subprocess.run([sys.executable, "-m", "mixboard_runner", "check", "argmax_torch", "--dtype", "float32",
                           "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    records = json.loads(done.stdout)
    assert {r["status"] for r in records} == {"pass"}
    assert {r["case"] for r in records} >= {"rows[float32]", "shape-vocab32000[float32]"}


def test_pytest_runs_a_dense_backend_with_no_test_file(tmp_path):
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("MIXBOARD_", "PYTEST_"))}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--mixboard-backend",
                           "rms_norm_torch", "--mixboard-dtype", "float32", "-v"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "8 passed" in done.stdout
    assert "::test_conformance[rms_norm_torch:shape-residual_fp32[float32]] PASSED" in done.stdout
