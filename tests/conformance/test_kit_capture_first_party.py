"""The first-party backends that run here (and the example vendor's) declare
the strongest capture level the kit does not refute: their own level's
cases pass (the first-party suites run them: test_kit_first_party.py), and
a copy declaring the next level fails the case of that level."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mixboard import get_registry
from mixboard.capture import ANY, LEVELS, UNIFORM_DECODE
from mixboard.testing.conformance import run_suite

CASE_OF = {UNIFORM_DECODE: "capture_decode", ANY: "capture_mixed"}
CPU_BACKENDS = ["sdpa", "sdpa_cpu", "mamba1_torch", "mamba1_cpu", "mamba2_torch", "mamba2_cpu", "short_conv_torch",
                "short_conv_cpu"]
EXAMPLE = Path(__file__).parents[2] / "examples" / "acme_plugin" / "src"


def declaring(cls: type, level: str) -> type:
    """A copy of ``cls`` that declares ``level``."""
    return type(cls.__name__, (cls,), {"name": cls.name, "capture": level})


def refutes(cls: type, level: str) -> tuple[str, str | None]:
    (result,) = run_suite(declaring(cls, level), "cpu", ("float32",), select=[CASE_OF[level]]).results
    if result.status == "skip":
        pytest.skip(result.reason)  # a kernel not built here
    return result.status, result.reason


def stronger(level: str) -> str:
    return LEVELS[LEVELS.index(level) + 1]


@pytest.mark.parametrize("name", CPU_BACKENDS)
def test_a_first_party_declaration_is_the_strongest_the_kit_does_not_refute(name):
    cls = get_registry().backends[name].cls
    assert cls.capture != ANY  # none of them reaches it yet: the case below would have nothing stronger
    if cls.capture != "never":
        assert refutes(cls, cls.capture) == ("pass", None)
    status, reason = refutes(cls, stronger(cls.capture))
    assert status == "fail", f"{name} passes capture={stronger(cls.capture)!r}: declare it"


def test_the_declared_levels():
    levels = {name: get_registry().backends[name].cls.capture for name in CPU_BACKENDS}
    assert levels == {**dict.fromkeys(CPU_BACKENDS, "never"), "sdpa_cpu": "uniform_decode"}


def test_the_example_vendor_declares_never_which_is_all_it_can(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    from acme_mixboard import AcmeAttention

    assert AcmeAttention.capture == "never"
    assert refutes(AcmeAttention, UNIFORM_DECODE)[0] == "fail"


def test_mixboard_check_json_carries_the_capture_cases():
    out = subprocess.run([sys.executable, "-m", "mixboard_runner", "check", "sdpa_cpu", "--case", "capture_decode",
                          "--case", "capture_mixed", "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    records = {r["case"]: r for r in json.loads(out.stdout)}
    if records["capture_decode[float32]"]["status"] == "skip":
        pytest.skip(records["capture_decode[float32]"]["reason"])  # its kernel is not built here
    assert records["capture_decode[float32]"]["status"] == "pass"
    assert records["capture_mixed[float32]"] == {
        "case": "capture_mixed[float32]", "status": "skip", "max_abs_error": None, "tolerance": 1e-05,
        "reason": "declares capture='uniform_decode': only steps of decodes are replayed, not mixed ones"}
