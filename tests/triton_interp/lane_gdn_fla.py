"""The Triton-interpreter lane, gdn_fla (run by tests/triton_interp/ci.sh in .venv-triton, not
collected by the main suite: its name is not test_*.py): the conformance kit, quick mode,
float32, on gdn_fla over fla-core's own Triton kernels (chunk_gated_delta_rule for prefills,
fused_recurrent_gated_delta_rule for decodes) on CPU tensors, behind fla_harness.py's shims.

The kit runs in a child process (run_kit.py --backend gdn_fla): the shims must be in place
before any fla kernel runs, which this process cannot promise."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mixboard.testing.conformance.modes import thorough_from_env

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import fla_harness  # noqa: E402


def test_kit_quick_mode_on_fla_kernels():
    if not fla_harness.fla_installed():
        pytest.fail("fla-core is not installed in .venv-triton (tests/triton_interp/ci.sh installs it)")
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    proc = subprocess.run([sys.executable, str(HERE / "run_kit.py"), "--backend", "gdn_fla",
                           *os.environ.get("MIXBOARD_LANE_ARGS", "").split()],
                          capture_output=True, text=True, env=env, timeout=None if thorough_from_env() else 900)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "kernels: InterpretedFunction" in proc.stdout and "'fail': 0" in proc.stdout


def test_without_the_shims_the_chunked_kernel_fails_as_the_harness_says():
    """Each shim is needed: without them fla's chunked prefill stops at the autotuner's GPU driver
    lookup (fla-core 0.6, Triton 3.9). Guards the harness against shims that outlive their cause."""
    code = ("import os; os.environ['TRITON_INTERPRET'] = '1'; import torch; "
            "from fla.ops.gated_delta_rule import chunk_gated_delta_rule as f; "
            "q = torch.randn(1, 8, 1, 16); v = torch.randn(1, 8, 1, 16); g = -torch.rand(1, 8, 1); "
            "f(q, q, v, g, torch.rand(1, 8, 1))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "0 active drivers" in proc.stderr, proc.stderr[-2000:]
