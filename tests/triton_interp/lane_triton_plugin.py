"""The Triton-interpreter lane, part two (run by tests/triton_interp/ci.sh in .venv-triton
with TRITON_INTERPRET=1; not collected by the main suite: its name is not test_*.py).

The kit itself runs as pytest items, one per case, through the kit's pytest plugin
(``--mixboard-backend triton_attn,short_conv_triton,mamba1_triton,moe_triton`` in ci.sh). Here: that
those cases ran mixboard-triton's kernels in the interpreter, and how selection treats the
plugin on CPU once the interpreter makes it available there."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from mixboard import AttentionSpec, Mamba1Spec, MoESpec, ShortConvSpec, get_registry
from mixboard.environment import detect

KINDS = [("attention", AttentionSpec(), "triton_attn", "sdpa_cpu"),
         ("short_conv", ShortConvSpec(), "short_conv_triton", "short_conv_cpu"),
         ("mamba1", Mamba1Spec(), "mamba1_triton", "mamba1_cpu"),
         ("moe", MoESpec(), "moe_triton", "moe_cpu")]


def test_the_lane_runs_in_the_interpreter():
    assert os.environ.get("TRITON_INTERPRET") == "1", "ci.sh sets TRITON_INTERPRET=1 for the whole lane"
    from mixboard_triton import _attention, _conv, _moe, _scan

    kernels = [_attention._paged_attention_kernel, _conv._conv_ragged_kernel, _conv._conv_step_kernel,
               _scan._scan_kernel, _scan._update_kernel, _moe._up_kernel, _moe._down_kernel]
    assert {type(k).__name__ for k in kernels} == {"InterpretedFunction"}


@pytest.mark.parametrize("kind, spec, triton_name, cpu_name", KINDS)
def test_the_cpu_kernels_still_win(kind, spec, triton_name, cpu_name):
    """Available under the interpreter, but below the first-party CPU kernels: a user who exports
    TRITON_INTERPRET=1 keeps the fast backends, and explain says which priority decided."""
    selection = get_registry().select(kind, spec, detect())
    assert selection.chosen.name == cpu_name
    assert selection.rejected[triton_name] == (f"available, but {cpu_name!r} has higher priority (20 > 15)",)


@pytest.mark.parametrize("kind, spec, triton_name, cpu_name", KINDS)
def test_served_when_named(kind, spec, triton_name, cpu_name):
    registry = get_registry()
    forced = registry.select(kind, spec, detect(), overrides=registry.parse_overrides(f"{kind}={triton_name}"))
    assert forced.chosen.name == triton_name
    preferred = registry.select(kind, spec, detect(), prefer=registry.parse_preferences(f"{kind}={triton_name}"))
    assert preferred.chosen.name == triton_name


def test_half_precision_refused_in_the_interpreter():
    selection = get_registry().select("attention", AttentionSpec(dtype="bfloat16"), detect())
    assert selection.rejected["triton_attn"] == (
        "Triton's interpreter (TRITON_INTERPRET=1) gives wrong bfloat16 results; float32 only there",)


def test_explain_says_why():
    """What a user sees: `mixboard explain` on the demo hybrid under the interpreter."""
    proc = subprocess.run([sys.executable, "-c", "import sys; from mixboard_runner.cli import main; "
                           "sys.argv = ['mixboard', 'explain']; sys.exit(main())"],
                          capture_output=True, text=True, env={**os.environ, "TRITON_INTERPRET": "1"}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for kind, _, triton_name, cpu_name in KINDS:
        if kind != "moe":  # the demo has no experts: `mixboard select moe` says it
            assert f"{triton_name}: available, but {cpu_name!r} has higher priority (20 > 15)" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "mixboard_runner", "select", "moe"], capture_output=True, text=True,
                          env={**os.environ, "TRITON_INTERPRET": "1"}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "available, but 'moe_cpu' has higher priority (20 > 15)" in proc.stdout
