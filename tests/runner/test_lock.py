"""Lock files: `mixboard lock` writes a plan down; a run with it reproduces the plan exactly, or
fails naming every difference (a backend not installed, another plugin version, another device,
another model)."""

from __future__ import annotations

import json
import re
import os
import subprocess
import sys

import pytest
import torch

from checkpoints import make_checkpoint
from distfactory import write_distribution
from mixboard import AttentionSpec, Mamba2Spec
from mixboard.errors import UsageError
from mixboard.lock import Lock, LockMismatch
from mixboard_runner.engine import Engine
from mixboard_runner.sampling import SamplingParams

SPLIT = "attention@decode=sdpa,mamba2@prefill=mamba2_torch"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    made = {}
    for model in ("bamba", "mamba"):
        made[model] = tmp_path_factory.mktemp(model)
        make_checkpoint(model, made[model])
    return made


def mixboard(*args, site=None, status=0):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MIXBOARD_")}
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [env.get("PYTHONPATH")])])
    out = subprocess.run([sys.executable, "-m", "mixboard_runner", *map(str, args)], capture_output=True, text=True,
                         env=env)
    assert out.returncode == status, (args, out.returncode, out.stderr[-2000:])
    return out


def choices(plan):
    return [(layer.name, layer.backend, layer.decode_backend) for layer in plan.layers]


def greedy(engine):
    torch.manual_seed(4)
    prompts = [torch.randint(0, 160, (n,)).tolist() for n in (7, 3, 12)]
    return [o.output_ids for o in engine.generate(prompts, SamplingParams(max_tokens=5, ignore_eos=True))]


def test_a_lock_round_trips_the_plan_and_the_outputs(models, tmp_path):
    path = tmp_path / "bamba.lock"
    summary = json.loads(mixboard("lock", models["bamba"], "--backend", SPLIT, "-o", path, "--json").stdout)
    ruled = Engine(models["bamba"], backend=SPLIT, prefer="", lock="")
    locked = Engine(models["bamba"], backend="", prefer="", lock=path)
    assert summary["fingerprint"] == ruled.plan.fingerprint == locked.plan.fingerprint
    assert choices(locked.plan) == choices(ruled.plan)
    assert summary["split_by_phase"] == sum(layer.split for layer in locked.plan.layers) == 4
    assert all(layer.selection.rule == "lock bamba.lock" for layer in locked.plan.layers)
    assert greedy(locked) == greedy(ruled)
    # the CLI reads it too, and $MIXBOARD_LOCK is --lock's default
    data = json.loads(mixboard("explain", models["bamba"], "--lock", path, "--json").stdout)
    assert data["fingerprint"] == summary["fingerprint"]
    written = json.loads(path.read_text())
    assert written["made_by"] == "mixboard lock" and written["model"]["model_type"] == "bamba"
    assert {g["kind"]: (g["prefill"], g["decode"]) for g in written["groups"]}["attention"] == ("sdpa_cpu", "sdpa")


def edited(path, tmp_path, change) -> str:
    data = json.loads(path.read_text())
    change(data)
    out = tmp_path / "edited.lock"
    out.write_text(json.dumps(data))
    return str(out)


def mismatch(model, lock) -> str:
    with pytest.raises(LockMismatch) as err:
        Engine(model, backend="", prefer="", lock=lock)
    return str(err.value)


def test_every_kind_of_difference_fails_with_its_reason(models, tmp_path):
    path = tmp_path / "bamba.lock"
    mixboard("lock", models["bamba"], "-o", path)

    def ghost(data):
        for group in data["groups"]:
            if group["kind"] == "attention":
                group["decode"] = "ghost_attn"
        data["backends"]["ghost_attn"] = {"distribution": "acme-ghost", "version": "2.0"}
    assert "backend 'ghost_attn' is not installed (the lock's came from acme-ghost 2.0)" in mismatch(
        models["bamba"], edited(path, tmp_path, ghost))

    def older(data):
        data["backends"]["sdpa_cpu"]["version"] = "0.0.1"
    assert "mixboard-sdpa 0.0.1 in the lock, mixboard-sdpa " in mismatch(models["bamba"], edited(path, tmp_path, older))

    def gpu(data):
        data["environment"].update(device="cuda", arch="sm_90", capability="9.0", runtime="cuda")
    assert "the environment differs: arch 'sm_90' in the lock, None here" in mismatch(
        models["bamba"], edited(path, tmp_path, gpu))

    def from_a_newer_mixboard(data):  # it records a fact of the machine this one does not know
        data["environment"]["npu_count"] = 8
    assert "the environment differs: npu_count 8 in the lock, None here" in mismatch(
        models["bamba"], edited(path, tmp_path, from_a_newer_mixboard))

    message = mismatch(models["mamba"], str(path))
    assert "layers not in the lock: backbone.embeddings, backbone.layers.0.norm, backbone.layers.0.mixer and" in message
    assert "locked layers this model does not have: model.embed_tokens" in message
    assert "the model is a 'mamba' checkpoint here, a 'bamba' one in the lock" in message

    with pytest.raises(LockMismatch) as err:  # the same checkpoint in another dtype
        Engine(models["bamba"], backend="", prefer="", lock=path, dtype="bfloat16")
    assert "layer specs differ (model.embed_tokens, " in str(err.value)
    assert "dtype 'float32' in the lock, 'bfloat16' here" in str(err.value)

    def another_spec(data):
        data["fingerprint"] = "0123456789abcdef"
    assert "the plan's fingerprint is" in mismatch(models["bamba"], edited(path, tmp_path, another_spec))

    with pytest.raises(UsageError, match="a lock fixes every layer's backends"):
        Engine(models["bamba"], backend="attention=sdpa", prefer="", lock=path)


def test_a_spec_written_another_way_that_means_the_same_is_no_difference(models, tmp_path):
    """vLLM sets attention's scale to 1/sqrt(head_size) where the runner leaves it None: one spec."""
    path = tmp_path / "bamba.lock"
    mixboard("lock", models["bamba"], "-o", path)

    def attention_scale(value):
        def change(data):
            for group in data["groups"]:
                if group["kind"] == "attention":
                    group["spec"]["scale"] = value if value else 1 / group["spec"]["head_size"] ** 0.5
        return change
    Engine(models["bamba"], backend="", prefer="", lock=edited(path, tmp_path, attention_scale(None)))
    message = mismatch(models["bamba"], edited(path, tmp_path, attention_scale(0.5)))
    assert "layer specs differ (model.layers." in message and "scale 0.5 in the lock, None here" in message


def test_mamba2_norm_eps_without_the_gated_norm_is_no_difference_and_not_named_beside_it():
    """Without the gated norm, norm_eps means nothing (Mamba2Spec.canonical): two engines that write it
    differently lock one spec; where gated_norm itself differs, it alone is named, not the norm_eps it
    makes differ. (The lock holds dt_max inf as "inf", read back as the float to build the spec.)"""
    from mixboard.lock import _spec_differences, plain_spec

    def differences(here, locked):
        locked = locked if isinstance(locked, dict) else plain_spec(locked)
        return _spec_differences([("model.layers.0.mixer", here, locked)])

    older = {k: v for k, v in plain_spec(Mamba2Spec()).items() if k != "gated_norm"}  # a lock from before the field
    assert differences(Mamba2Spec(), older) == []
    assert differences(Mamba2Spec(gated_norm=False), older) == [
        "layer specs differ (model.layers.0.mixer): gated_norm None in the lock, False here"]
    assert differences(Mamba2Spec(gated_norm=False, norm_eps=1e-6), Mamba2Spec(gated_norm=False)) == []
    assert differences(Mamba2Spec(gated_norm=False, norm_eps=1e-6), Mamba2Spec(norm_eps=1e-6)) == [
        "layer specs differ (model.layers.0.mixer): gated_norm True in the lock, False here"]
    assert differences(Mamba2Spec(norm_eps=1e-6), Mamba2Spec()) == [
        "layer specs differ (model.layers.0.mixer): norm_eps 1e-05 in the lock, 1e-06 here"]
    # attention: another head size alone is named, not the scale None it derives another value from
    assert differences(AttentionSpec(head_size=128), AttentionSpec(head_size=64)) == [
        "layer specs differ (model.layers.0.mixer): head_size 64 in the lock, 128 here"]


def test_a_bad_option_value_in_a_lock_names_the_lock(models, tmp_path):
    path = tmp_path / "split.lock"
    mixboard("lock", models["bamba"], "--backend", SPLIT, "-o", path)

    def zero(data):
        data["options"]["sdpa"]["decode_chunk_mib"] = 0
    message = mismatch(models["bamba"], edited(path, tmp_path, zero))
    assert message.startswith(f"lock {tmp_path / 'edited.lock'}: backend option") and "at least 1" in message


def test_a_lock_made_for_another_machine_says_so(models, tmp_path):
    path = tmp_path / "h100.lock"
    mixboard("lock", models["bamba"], "--arch", "sm_90", "-o", path)
    err = mixboard("run", models["bamba"], "--lock", path, "--prompt-ids", "1,2", status=2).stderr
    assert "cannot be reproduced here:" in err and "device 'cuda' in the lock, 'cpu' here" in err


def test_an_upgraded_plugin_is_a_difference(models, tmp_path):
    """A real installed distribution, locked at 1.0, then replaced by 1.1."""
    plugin = """
        from mixboard import hookimpl
        from mixboard_sdpa.backend import SdpaAttention

        class LockableAttention(SdpaAttention):
            name, kind, priority, devices, dtypes, api_version = "lockable_attn", "attention", 90, ("*",), ("float32",), 1

        @hookimpl
        def mixboard_backends():
            return [LockableAttention]
    """
    old, new = tmp_path / "old", tmp_path / "new"
    write_distribution(old, "acme-lockable", "1.0", {"lockable": "lockable"}, {"lockable.py": plugin})
    write_distribution(new, "acme-lockable", "1.1", {"lockable": "lockable"}, {"lockable.py": plugin})
    path = tmp_path / "lockable.lock"
    mixboard("lock", models["bamba"], "-o", path, site=old)
    assert json.loads(path.read_text())["backends"]["lockable_attn"] == {"distribution": "acme-lockable",
                                                                          "version": "1.0"}
    mixboard("explain", models["bamba"], "--lock", path, site=old)  # the same install reproduces it
    err = mixboard("explain", models["bamba"], "--lock", path, site=new, status=2).stderr
    assert "acme-lockable 1.0 in the lock, acme-lockable 1.1 here (lockable_attn)" in err
    err = mixboard("explain", models["bamba"], "--lock", path, status=2).stderr
    assert "backend 'lockable_attn' is not installed (the lock's came from acme-lockable 1.0)" in err


@pytest.mark.parametrize("text, message", [
    ("not json", "not a mixboard lock (not JSON"),
    ('{"groups": []}', "not a mixboard lock (no lock_version)"),
    ('{"lock_version": 9}', "lock format 9; this mixboard reads format 2"),
    ('{"lock_version": 2, "groups": {}}', "'groups' missing or not a list"),
    ('{"lock_version": 2, "groups": [{"kind": "attention", "prefill": "sdpa", "decode": "sdpa", "layers": ["a"]}], '
     '"backends": {}, "environment": {}, "fingerprint": ""}', "a group without kind, prefill, decode, spec"),
    ('{"lock_version": 2, "groups": [], "backends": {"sdpa": "x"}, "environment": {}, "fingerprint": ""}',
     "backend 'sdpa' without the distribution and version it came from"),
    ('{"lock_version": 2, "groups": [{"kind": "attention", "prefill": "sdpa", "decode": "sdpa", "spec": {}, '
     '"layers": ["a"]}], "backends": {}, "environment": {}, "fingerprint": ""}',
     "no distribution recorded for backend(s) sdpa"),
    ('{"lock_version": 2, "groups": [], "backends": {}, "environment": {}, "fingerprint": "", "options": {"sdpa": 3}}',
     "'options' not a mapping of backend to its option values"),
    # one layer, two backends: which one the lock means cannot be told
    ('{"lock_version": 2, "groups": [{"kind": "attention", "prefill": "sdpa", "decode": "sdpa", "spec": {}, '
     '"layers": ["a"]}, {"kind": "attention", "prefill": "x", "decode": "x", "spec": {}, "layers": ["b", "a"]}], '
     '"backends": {"sdpa": {"distribution": "d", "version": "1"}, "x": {"distribution": "d", "version": "1"}}, '
     '"environment": {}, "fingerprint": ""}', "not a mixboard lock (layer 'a' listed twice)"),
    ('{"lock_version": 2, "groups": [{"kind": "attention", "prefill": "sdpa", "decode": "sdpa", "spec": {}, '
     '"layers": ["a", "a"]}], "backends": {"sdpa": {"distribution": "d", "version": "1"}}, "environment": {}, '
     '"fingerprint": ""}', "layer 'a' listed twice"),
])
def test_a_file_that_is_not_a_lock_is_refused_in_one_line(tmp_path, text, message):
    path = tmp_path / "bad.lock"
    path.write_text(text)
    with pytest.raises(UsageError, match=re.escape(message)):
        Lock.read(path)


def test_lock_will_not_overwrite_a_file_unasked(models, tmp_path):
    path = tmp_path / "x.lock"
    path.write_text("keep")
    err = mixboard("lock", models["bamba"], "-o", path, status=2).stderr
    assert "exists: give --force to overwrite it" in err and path.read_text() == "keep"
