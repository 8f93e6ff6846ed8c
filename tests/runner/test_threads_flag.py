"""``--threads`` of ``mixboard run`` and ``mixboard tune``: the threads the model's ops run with, and
the note a busy machine gets (benchmarks/README.md, "Threads on a busy machine", measures why)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mixboard_runner import threads as threads_module
from mixboard_runner.threads import busy_note


def mixboard(*args, env=None, cwd=None):
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("MIXBOARD_", "OMP_"))}
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "mixboard_runner", *map(str, args)], capture_output=True,
                          text=True, env=environ, cwd=cwd)


@pytest.mark.parametrize("flag, env, want", [
    ([], {"OMP_NUM_THREADS": "1"}, 1),  # the default is torch's: $OMP_NUM_THREADS (up to the cores)
    (["--threads", "2"], {"OMP_NUM_THREADS": "1"}, 2),  # the flag wins
    (["--threads", "3"], {}, 3),  # even past the cores: asked for
])
def test_run_reports_the_threads_it_ran_with(flag, env, want):
    out = mixboard("run", "--max-tokens", "2", "--json", *flag, env=env)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["stats"]["threads"] == want
    text = mixboard("run", "--max-tokens", "2", *flag, env=env)
    assert text.stdout.rstrip().endswith(f", {want} thread{'s' if want > 1 else ''}"), text.stdout[-300:]


@pytest.mark.parametrize("command", ["run", "tune"])
def test_threads_below_one_are_one_line(command, tmp_path):
    out = mixboard(command, "--threads", "0", cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr == f"mixboard {command}: error: --threads must be at least 1, not 0\n"


def test_tune_measures_with_the_threads_given_and_says_so(tmp_path):
    out = mixboard("tune", "--kinds", "short_conv", "--prompt", "8", "--batch", "2", "--context", "8",
                   "--budget", "0.01", "--threads", "1", "-o", tmp_path / "t.lock", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout)["threads"] == 1
    assert json.loads((tmp_path / "t.lock").read_text())["measurements"]["threads"] == 1


@pytest.mark.parametrize("threads, load, cores, want", [
    (2, 0.1, 2, None),  # a quiet machine
    (2, 0.6, 2, None),  # the tail of a job that just ended
    (2, 1.0, 2, "--threads 1 may be faster"),  # one other busy process
    (2, 4.0, 2, "--threads 1 may be faster"),
    (1, 4.0, 2, None),  # one thread waits for nobody
    (8, 3.0, 16, None),  # cores to spare
    (16, 6.0, 16, "--threads 10 may be faster"),
])
def test_a_busy_machine_gets_a_note_naming_the_threads_to_try(threads, load, cores, want):
    note = busy_note(threads, load, cores)
    if want is None:
        assert note is None
    else:
        assert note.startswith(f"the machine is busy (load {load:.1f} on {cores} cores): with {threads} threads")
        assert note.endswith(want)


def _main_on_a_busy_machine(monkeypatch, capsys, *args, default_threads=2):
    """``mixboard run`` in this process with the cores held by other work (a load average of 8 on 2
    cores) and torch's default at ``default_threads``; torch's threads are put back afterwards."""
    import torch

    from mixboard_runner.cli import main

    monkeypatch.setattr(os, "getloadavg", lambda: (8.0, 8.0, 8.0))
    monkeypatch.setattr(threads_module, "cores", lambda: 2)  # 8 on 2 cores on any machine: the note is due
    before = torch.get_num_threads()
    torch.set_num_threads(default_threads)
    try:
        code = main(["run", *map(str, args)])
    finally:
        torch.set_num_threads(before)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["--prompt-ids", "1,999"], "token id 999 is outside the vocabulary"),  # found once the model is loaded
    (["--prompt-ids", ",".join(["1"] * 600)], "longer than this model and cache allow"),
    (["--prompt-ids", "1", "--backend", "attention=nope"], "unknown backend 'nope'"),
    (["--prompt-ids", "1", "--top-k", "5"], "only apply when sampling"),
])
def test_a_user_mistake_on_a_busy_machine_is_still_one_line(monkeypatch, capsys, llama_dir, args, message):
    code, err = _main_on_a_busy_machine(monkeypatch, capsys, llama_dir, "--max-tokens", "1", *args)
    assert code == 2 and len(err.splitlines()) == 1 and message in err, err


def test_a_run_on_a_busy_machine_gets_the_note_unless_threads_are_given(monkeypatch, capsys, llama_dir):
    run = (llama_dir, "--prompt-ids", "1,2", "--max-tokens", "1")
    code, err = _main_on_a_busy_machine(monkeypatch, capsys, *run)
    assert code == 0 and err == ("mixboard run: note: the machine is busy (load 8.0 on 2 cores): with 2 threads, "
                                 "every parallel op waits for whichever thread "
                                 "other processes keep off its core; --threads 1 may be faster\n"), err
    code, err = _main_on_a_busy_machine(monkeypatch, capsys, *run, "--threads", "2")
    assert code == 0 and err == "", err  # the user chose the threads: no note
    code, err = _main_on_a_busy_machine(monkeypatch, capsys, *run, default_threads=1)
    assert code == 0 and err == "", err  # one thread waits for nobody
