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
from mixboard import AttentionSpec, Backend, Registry
from mixboard.kinds import Kind
from mixboard.kinds.op import no_state
from mixboard.state import StateSpec
from mixboard_runner.tune import Group, pick

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


def test_tune_checks_where_it_writes_before_measuring(setup):
    err = mixboard(setup, "tune", setup / "llama", "-o", setup / "no-such-folder" / "x.lock", status=2).stderr
    assert "cannot write" in err and "no folder" in err and "Traceback" not in err


# How pick chooses, from given times: which pair wins is a rule of its own, apart from measuring.

def _backend(name, kind="attention", state=None):
    attrs = dict(name=name, kind=kind, priority=1, devices=("*",), dtypes=("float32",), api_version=1)
    if state is not None:
        attrs["state_spec"] = classmethod(lambda cls, spec: state(spec))
    return type(name, (Backend,), attrs)


def _transposed(spec):  # attention's state kept another way
    return StateSpec.paged(kv=((2, spec.head_size, spec.num_kv_heads), spec.dtype))


def _picked(kind_name, times, states=None, kinds=()):
    states = states or {}
    backends = {b: _backend(b, kind_name, states.get(b)) for b in times}
    registry = Registry.from_backends(tuple(backends.values()), kinds)
    kind = registry.kind(kind_name)
    group = Group(kind_name, kind.default_spec(), ["l.0", "l.1"], ("x", "x"))
    group.candidates = list(times)
    group.times = {b: {"prefill": p, "decode": d} for b, (p, d) in times.items()}
    pick(group, kind, backends)
    return group.winner, group.note


def test_pick_splits_a_layer_only_where_it_pays():
    # each backend is twice the other's time in one phase: the split halves the cost
    assert _picked("attention", {"a": (10, 10), "b": (20, 5)}) == (("a", "b"), "")
    # a split that saves under 5 % is not worth two backends: the best single one wins
    winner, note = _picked("attention", {"a": (10, 5.2), "b": (10.2, 5)})
    assert winner == ("b", "b") and "would save under 5%" in note
    # both phases fastest on one backend: no split to consider
    assert _picked("attention", {"a": (10, 5), "b": (12, 6)}) == (("a", "a"), "")


def test_pick_keeps_a_layer_whole_where_its_state_or_kind_cannot_split():
    winner, note = _picked("attention", {"a": (10, 10), "odd": (20, 5)}, {"odd": _transposed})
    assert winner == ("a", "a") and "keeps the state two ways" in note
    blob = Kind("blob", AttentionSpec, object, no_state, "a kind that declares no row inputs")
    winner, note = _picked("blob", {"a": (10, 10), "b": (20, 5)}, kinds=[blob])
    assert winner[0] == winner[1] and "cannot split its rows by phase" in note


def test_pick_says_a_split_dense_op_prepares_its_weights_per_phase():
    winner, note = _picked("linear", {"a": (10, 10), "b": (20, 5)})
    assert winner == ("a", "b") and "prepares its own weights" in note
