"""The pytest plugin (entry point pytest11 ``mixboard``), as installed with
mixboard: ``pytest --mixboard-backend NAME`` runs the kit against an
installed backend with no test file written, and without the option it
adds nothing to a pytest run (no tests, no torch import)."""

from __future__ import annotations

import os
import subprocess
import sys

PLAIN_TEST = '''
import sys


def test_plain():
    # the plugin is loaded (pytest11) but idle: neither the kit nor torch was imported
    assert "mixboard.testing.pytest_plugin" in sys.modules
    assert "mixboard.testing.conformance" not in sys.modules and "torch" not in sys.modules
'''


def pytest_in(folder, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MIXBOARD_", "PYTEST_"))}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=folder,
                          capture_output=True, text=True, env=env)


def test_the_kit_runs_against_an_installed_backend_with_no_test_file(tmp_path):
    out = pytest_in(tmp_path, "--mixboard-backend", "short_conv_torch", "--mixboard-dtype", "float32", "-v")
    assert out.returncode == 0, out.stdout[-3000:]
    assert "20 passed" in out.stdout
    assert "::test_conformance[short_conv_torch:chunked_prefill[float32]] PASSED" in out.stdout


def test_several_backends_and_paths_given_on_the_command_line(tmp_path):
    (tmp_path / "test_plain.py").write_text("def test_plain():\n    pass\n")
    out = pytest_in(tmp_path, "--mixboard-backend", "short_conv_torch,short_conv_typo", "--mixboard-dtype", "float32",
                    "-k", "ragged_prefill or suite or plain", "test_plain.py")
    assert out.returncode == 1
    assert "1 failed, 2 passed" in out.stdout, out.stdout[-3000:]
    assert "unknown backend 'short_conv_typo'; did you mean 'short_conv_torch'?" in out.stdout


def test_a_backend_whose_every_case_skipped_ran_nothing_and_exits_5(tmp_path):
    args = ("--mixboard-backend", "short_conv_cuda,short_conv_torch", "--mixboard-dtype", "float32", "-k", "ragged")
    out = pytest_in(tmp_path, *args)
    assert out.returncode == 5, out.stdout[-3000:]
    assert "1 passed, 1 skipped" in out.stdout
    (line,) = [ln for ln in out.stdout.splitlines() if ln.startswith("mixboard: ")]
    assert line.startswith("mixboard: short_conv_cuda ran no case: every one was skipped: device 'cuda' is not "
                           "available here: ") and line.endswith("; --mixboard-allow-skip accepts that")
    allowed = pytest_in(tmp_path, *args, "--mixboard-allow-skip")
    assert allowed.returncode == 0 and "mixboard: " not in allowed.stdout, allowed.stdout[-3000:]


def test_without_the_option_it_adds_nothing(tmp_path):
    (tmp_path / "test_plain.py").write_text(PLAIN_TEST)
    out = pytest_in(tmp_path, "-q")
    assert out.returncode == 0, out.stdout
    assert "1 passed" in out.stdout
    listed = pytest_in(tmp_path, "--collect-only", "-q")
    assert listed.stdout.splitlines()[0] == "test_plain.py::test_plain"
    assert "1 test collected" in listed.stdout
    helped = pytest_in(tmp_path, "--help")
    assert "--mixboard-backend=NAME" in helped.stdout and "--mixboard-device=DEVICE" in helped.stdout
    assert "--mixboard-allow-skip" in helped.stdout
