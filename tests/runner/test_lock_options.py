"""Backend options in a lock file: `mixboard lock --backend-option` writes them, a run with the
lock runs with exactly them (and takes no other), and a lock whose options were changed by hand
is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from checkpoints import make_checkpoint
from mixboard.lock import LockMismatch
from mixboard_runner.engine import Engine

RULES = ("--backend", "attention@decode=sdpa,linear=linear_onednn")
OPTIONS = "sdpa.decode_chunk_mib=16,linear_onednn.layout=column_major"
WRITTEN = {"sdpa": {"decode_chunk_mib": 16}, "linear_onednn": {"layout": "column_major"}}


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    directory = tmp_path_factory.mktemp("llama")
    make_checkpoint("llama", directory)
    return directory


def mixboard(*args, status=0):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MIXBOARD_")}
    out = subprocess.run([sys.executable, "-m", "mixboard_runner", *map(str, args)], capture_output=True, text=True,
                         env=env)
    assert out.returncode == status, (args, out.returncode, out.stderr[-2000:])
    return out


@pytest.fixture(scope="module")
def locked(llama, tmp_path_factory):
    path = tmp_path_factory.mktemp("locks") / "options.lock"
    mixboard("lock", llama, *RULES, "--backend-option", OPTIONS, "-o", path, "--json")
    return path


def test_the_lock_holds_the_options_and_a_run_with_it_runs_with_them(llama, locked):
    data = json.loads(locked.read_text())
    assert data["options"] == WRITTEN  # a split layer's decode backend (sdpa) included
    explained = json.loads(mixboard("explain", llama, "--lock", locked, "--json").stdout)
    assert explained["options"] == WRITTEN and explained["fingerprint"] == data["fingerprint"]
    engine = Engine(llama, backend="", prefer="", lock=locked, backend_options="", cache_memory=16 * 2**20)
    assert engine.plan.options == WRITTEN and engine.plan.fingerprint == data["fingerprint"]
    layouts = {op.impl.layout for name, op in engine.model.layers().items()
               if engine.plan.layer(name).backend == "linear_onednn"}
    assert layouts == {"column_major"}


def test_options_beside_a_lock_are_an_error(llama, locked):
    out = mixboard("run", llama, "--lock", locked, "--backend-option", "sdpa.decode_chunk_mib=32", "--max-tokens", "1",
                   status=2)
    assert "a lock fixes the backends' options too: give it without --backend-option" in out.stderr


def test_a_lock_whose_options_were_edited_is_refused(llama, locked, tmp_path):
    data = json.loads(locked.read_text())
    data["options"]["sdpa"]["decode_chunk_mib"] = 32  # another value: another plan than the lock's
    edited = tmp_path / "edited.lock"
    edited.write_text(json.dumps(data))
    with pytest.raises(LockMismatch, match="the plan's fingerprint is"):
        Engine(llama, backend="", prefer="", lock=edited, backend_options="")
    data["options"]["sdpa"]["decode_chunk_mib"] = 0  # a bad value: the option's own error
    edited.write_text(json.dumps(data))
    out = mixboard("explain", llama, "--lock", edited, status=2)
    assert "decode_chunk_mib takes an integer of at least 1, not 0" in out.stderr
    del data["options"]["sdpa"]  # a lock without a backend's options (written before it declared them)
    edited.write_text(json.dumps(data))
    out = mixboard("explain", llama, "--lock", edited, status=2)
    assert "backend options differ" in out.stderr
