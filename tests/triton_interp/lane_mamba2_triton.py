"""The Triton-interpreter lane (run by tests/triton_interp/ci.sh in .venv-triton, not
collected by the main suite: its name is not test_*.py): the conformance kit, quick mode,
float32, on mamba2_triton over mamba-ssm's own Triton kernels on CPU tensors.

The kit runs in a child process (run_kit.py): the interpreter must be on before any
@triton.jit runs, which this process (pytest, transformers) cannot promise."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mixboard.testing.conformance.modes import thorough_from_env

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import harness  # noqa: E402


def test_kit_quick_mode_on_the_real_kernels():
    if harness.mamba_ssm_source() is None:
        pytest.fail("mamba-ssm sources not fetched (tests/triton_interp/fetch_mamba_ssm.sh)")
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    proc = subprocess.run([sys.executable, str(HERE / "run_kit.py"), *os.environ.get("MIXBOARD_LANE_ARGS", "").split()],
                          capture_output=True, text=True, env=env,
                          timeout=None if thorough_from_env() else 900)  # the long cases take hours
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "kernels: InterpretedFunction" in proc.stdout and "'fail': 0" in proc.stdout
