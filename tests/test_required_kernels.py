"""MIXBOARD_REQUIRE_KERNELS=1 (CI): a compiled kernel that did not build
fails the test run in one line naming it, instead of skipping its tests."""

from __future__ import annotations

import os
import subprocess
import sys

from compiled_kernels import ROOT, VARIABLE, kernels

# A run of one quick test file, with one kernel hidden as if its build had failed.
RUN_HIDING = """
import sys
sys.modules[{module!r}] = None  # importlib.util.find_spec now finds nothing, as where it was not built
import pytest
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "tests/test_readme.py"]))
"""


def _run(module: str, required: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != VARIABLE}
    if required is not None:
        env[VARIABLE] = required
    return subprocess.run([sys.executable, "-c", RUN_HIDING.format(module=module)], cwd=ROOT, env=env,
                          capture_output=True, text=True)


def test_every_c_source_is_a_kernel_some_setup_py_builds():
    sources = [*ROOT.glob("plugins/*/src/*/_*.c"), *ROOT.glob("runner/*/_*.c")]
    assert sorted(f"{s.parent.name}.{s.stem}" for s in sources) == sorted(kernels())


def test_a_missing_kernel_fails_the_run_naming_it_when_required():
    out = _run("mixboard_mamba1._decode_step", "1")
    assert out.returncode == 1, out.stdout + out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith(f"Exit: {VARIABLE} is set")
    assert "mixboard_mamba1._decode_step (pip install -e plugins/mamba1)" in line
    assert "[100%]" not in out.stdout  # stopped before any test


def test_without_the_variable_its_tests_may_skip_and_the_run_goes_on():
    for required in (None, "0"):
        out = _run("mixboard_mamba1._decode_step", required)
        assert out.returncode == 0 and "[100%]" in out.stdout, out.stdout + out.stderr
