"""Who may change the process's allocator (host_memory.py): an Engine only
when asked, since a library must leave its host process alone; ``mixboard
run``, the whole program, asks."""

from __future__ import annotations

import platform
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                                reason="the setting is glibc's")


def _applied_after(code: str) -> bool:
    """Whether the allocator setting is in force in a fresh process after ``code`` runs."""
    script = textwrap.dedent(code) + "\nfrom mixboard_runner import host_memory\nprint('applied', host_memory._done)\n"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    (line,) = [l for l in out.stdout.splitlines() if l.startswith("applied ")]
    return line == "applied True"


@pytest.mark.parametrize("argument, applied", [("", False), (", reuse_host_memory=False", False),
                                               (", reuse_host_memory=True", True)])
def test_an_engine_changes_the_allocator_only_when_asked(argument, applied):
    assert _applied_after(f"""
        from mixboard_runner.engine import Engine
        Engine("demo"{argument})
    """) is applied


def test_mixboard_run_asks_for_it():
    assert _applied_after("""
        from mixboard_runner.cli import main
        assert main(["run", "demo", "--prompt-ids", "1,2", "--max-tokens", "1", "--json"]) == 0
    """)


def test_the_argument_is_a_flag():
    from mixboard.errors import UsageError
    from mixboard_runner.engine import Engine

    with pytest.raises(UsageError, match="reuse_host_memory must be True or False, not 'yes'"):
        Engine("demo", reuse_host_memory="yes")
