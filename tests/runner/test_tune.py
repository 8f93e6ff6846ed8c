"""`mixboard tune`: measured choices beat priorities. A test plugin (a real installed distribution)
adds attention backends that compute what sdpa computes but sleep: one on every step, one on decode
steps only, both with the highest priority. Tune must pass over each where it is slow."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from checkpoints import make_checkpoint
from distfactory import write_distribution

SLOW = """
    import time

    from mixboard import hookimpl
    from mixboard_sdpa.backend import SdpaAttention


    class Sleepy(SdpaAttention):
        name, kind, priority, devices, dtypes, api_version = "sleepy_attn", "attention", 99, ("*",), ("float32",), 1

        @classmethod
        def make_impl(cls, spec, env):
            impl = super().make_impl(spec, env)
            forward = impl.forward

            def slow(q, k, v, state, meta):
                if cls.sleeps(meta):
                    time.sleep(0.05)
                return forward(q, k, v, state, meta)

            impl.forward = slow
            return impl

        @staticmethod
        def sleeps(meta):
            return True


    class SleepyDecode(Sleepy):
        name, kind, priority, devices, dtypes, api_version = "sleepy_decode_attn", "attention", 98, ("*",), ("float32",), 1

        @staticmethod
        def sleeps(meta):
            return meta.common.num_decodes > 0  # sdpa's metadata keeps the step's


    @hookimpl
    def mixboard_backends():
        return [Sleepy, SleepyDecode]
"""


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("tune")
    write_distribution(root / "site", "acme-sleepy", "1.0", {"sleepy": "sleepy"}, {"sleepy.py": SLOW})
    make_checkpoint("llama", root / "llama")
    return root


def mixboard(root, *args, status=0):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MIXBOARD_")}
    env["PYTHONPATH"] = os.pathsep.join([str(root / "site"), *filter(None, [env.get("PYTHONPATH")])])
    out = subprocess.run([sys.executable, "-m", "mixboard_runner", *map(str, args)], capture_output=True, text=True,
                         env=env, cwd=root)
    assert out.returncode == status, (args, out.returncode, out.stderr[-3000:])
    return out


def test_tune_picks_the_faster_backend_per_phase_and_locks_it(setup):
    lock = setup / "tuned.lock"
    plan = json.loads(mixboard(setup, "explain", setup / "llama", "--json").stdout)
    assert {c["backend"] for c in plan["choices"] if c["kind"] == "attention"} == {"sleepy_attn"}  # by priority
    out = json.loads(mixboard(setup, "tune", setup / "llama", "--kinds", "attention", "--prompt", "16", "--batch",
                              "2", "--context", "16", "--budget", "0.05", "-o", lock, "--json").stdout)
    (group,) = [g for g in out["groups"] if g["kind"] == "attention"]
    measured = {m["backend"]: m for m in group["measured"]}
    assert {"sleepy_attn", "sleepy_decode_attn", "sdpa_cpu", "sdpa"} <= set(measured)
    assert group["by_priority"] == {"prefill": "sleepy_attn", "decode": "sleepy_attn"}
    # a sleep of 50 ms a layer: the sleepers lose every phase they sleep in, by far
    assert group["prefill"] != "sleepy_attn" and group["decode"] not in ("sleepy_attn", "sleepy_decode_attn")
    fastest_decode = min(measured.values(), key=lambda m: m["decode_ms"])["backend"]
    assert group["decode"] == fastest_decode
    assert measured["sleepy_attn"]["decode_ms"] > 50 * group["layers"] > measured[fastest_decode]["decode_ms"]
    # groups not asked for keep the priority's choice, unmeasured
    others = [g for g in out["groups"] if g["kind"] != "attention"]
    assert all(g["measured"] == [] and g["note"] == "not measured (--kinds)" for g in others)
    # the lock holds the measured choice, and a run reproduces it
    written = json.loads(lock.read_text())
    assert written["made_by"] == "mixboard tune"
    assert {(g["prefill"], g["decode"]) for g in written["groups"] if g["kind"] == "attention"} == {
        (group["prefill"], group["decode"])}
    ran = json.loads(mixboard(setup, "run", setup / "llama", "--lock", lock, "--prompt-ids", "1,2,3",
                              "--max-tokens", "3", "--json").stdout)
    assert ran["plan"]["fingerprint"] == out["fingerprint"]


def test_tune_refuses_bad_input_in_one_line(setup):
    err = mixboard(setup, "tune", setup / "llama", "--kinds", "mamba9", "-o", setup / "x.lock", status=2).stderr
    assert "--kinds names mamba9, which this model has no layers of" in err and "Traceback" not in err
    err = mixboard(setup, "tune", setup / "llama", "--batch", "0", status=2).stderr
    assert "--batch must be at least 1, not 0" in err
