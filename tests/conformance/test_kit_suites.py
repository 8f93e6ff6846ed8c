"""The base test classes as a vendor uses them, run by an inner pytest:
one test per case, declared failures as strict xfails, cases the backend
rejects skipped with its reasons, and a misdeclared suite reported as one
failing test that says what is wrong (never a collection error that stops
the whole run). The inner pytest runs in a subprocess: pytester's
in-process runs unload the modules they imported, which torch does not
survive (a segfault at exit)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

BACKENDS = '''
from mixboard.testing.conformance import AttentionConformance, ShortConvConformance
from mixboard_shortconv.torch_backend import ShortConvTorch
from mixboard_shortconv.torch_impl import ShortConvTorchImpl


class Doubling(ShortConvTorchImpl):
    def forward(self, *args):
        return super().forward(*args) * 2


class DoubledShortConv(ShortConvTorch):
    name = "short_conv_doubled"

    @classmethod
    def make_impl(cls, spec, env):
        return Doubling(spec)


class NarrowShortConv(ShortConvTorch):
    name = "short_conv_narrow"

    @classmethod
    def check(cls, spec, env):
        return [] if spec.conv_width <= 3 else [f"acme kernels take conv widths up to 3, not {spec.conv_width}"]
'''


SUITES = '''

class TestDoubled(ShortConvConformance):
    backend = DoubledShortConv          # a class works as well as an installed name
    dtypes = ("float32",)
    expected_failures = {"ragged_prefill": "doubles its output (planted)"}


class TestPortable(ShortConvConformance):
    backend = "short_conv_torch"
    dtypes = ("float32",)
    expected_failures = {"mixed_batch[float32]": "a failure that does not happen"}


class TestNarrow(ShortConvConformance):
    backend = "short_conv_narrow"
    registry = __import__("mixboard").Registry.from_backends([NarrowShortConv])
    dtypes = ("float32",)


class TestCuda(ShortConvConformance):
    backend = "short_conv_cuda"
    device = "cuda"


class TestUnknown(ShortConvConformance):
    backend = "short_conv_typo"


class TestWrongKind(AttentionConformance):
    backend = "short_conv_torch"


class TestUnknownExpectedFailure(ShortConvConformance):
    backend = "short_conv_torch"
    expected_failures = {"chunked_prefil": "typo"}


class TestNoBackend(ShortConvConformance):
    pass
'''


@pytest.fixture(scope="module")
def inner(tmp_path_factory):
    """One pytest run, in a subprocess, of a vendor's test file holding every suite above."""
    folder = tmp_path_factory.mktemp("vendor")
    (folder / "test_vendor.py").write_text(BACKENDS + SUITES)
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", "-rsxX",
                          "-k", "ragged_prefill or mixed_batch or shape-width or suite or TestCuda"],
                         cwd=folder, capture_output=True, text=True)
    return out.stdout


def outcome(output: str, test: str) -> str:
    line = next(line for line in output.splitlines() if line.startswith(f"test_vendor.py::{test} "))
    return line.split()[1]


def test_one_test_per_case_and_declared_failures_are_strict(inner):
    assert outcome(inner, "TestDoubled::test_conformance[ragged_prefill[float32]]") == "XFAIL"
    assert outcome(inner, "TestDoubled::test_conformance[mixed_batch[float32]]") == "FAILED"
    assert outcome(inner, "TestPortable::test_conformance[ragged_prefill[float32]]") == "PASSED"
    assert outcome(inner, "TestPortable::test_conformance[mixed_batch[float32]]") == "FAILED"  # strict: it passed
    assert "[XPASS(strict)] a failure that does not happen" in inner
    assert "doubles its output (planted)" in inner
    # the failure says where and by how much
    assert re.search(r"mixed_batch\[float32\]: step 1 of 4: sequence '\w' at position \d+: "
                     r"\|backend - oracle\| = \S+ > tolerance 1e-05", inner), inner[-3000:]


def test_cases_the_backend_rejects_are_skipped_with_its_reasons(inner):
    assert outcome(inner, "TestNarrow::test_conformance[shape-width2[float32]]") == "PASSED"
    assert outcome(inner, "TestNarrow::test_conformance[shape-width4[float32]]") == "SKIPPED"
    assert "acme kernels take conv widths up to 3, not 6" in inner


def test_a_gpu_backend_on_this_machine_is_skipped_with_its_reasons(inner):
    lines = [line for line in inner.splitlines() if line.startswith("test_vendor.py::TestCuda::")]
    assert len(lines) == 68 and all(" SKIPPED " in line for line in lines)  # 22 + 23 + 23 cases
    assert re.search(r"SKIPPED \[68\] .*device 'cuda' is not available here: torch sees no CUDA( or ROCm)? device; "
                     r"runs on cuda; .*'causal_conv1d'", inner), inner[-3000:]


def test_a_misdeclared_suite_is_one_failing_test_that_says_why(inner):
    for suite in ("TestUnknown", "TestWrongKind", "TestUnknownExpectedFailure", "TestNoBackend"):
        assert outcome(inner, f"{suite}::test_conformance[suite]") == "FAILED"
    assert "TestUnknown: unknown backend 'short_conv_typo'; did you mean 'short_conv_torch'?" in inner
    assert ("TestWrongKind: backend 'short_conv_torch' serves short_conv, not attention: "
            "use the short_conv suite") in inner
    assert "TestUnknownExpectedFailure: expected_failures names no case: chunked_prefil (cases are " in inner
    assert "TestNoBackend must name its backend" in inner
