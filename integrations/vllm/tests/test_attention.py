"""Attention-only model (llama): every attention layer on the backend its rule or priority picks."""

import re

from harness import ok, run

RULES = "model.layers.0.*=acme_attn,model.layers.2.*=sdpa"


def test_layer_rules_mix_first_party_and_vendor_backends(workdir, checkpoint, native):
    r = ok(run(workdir, "llama_rules", checkpoint("llama"), {"MIXBOARD_BACKEND": RULES}))
    assert r.ids == native("llama")
    assert r.table == {
        "model.layers.0.self_attn.attn": ("attention", "acme_attn", "forced by model.layers.0.*=acme_attn"),
        "model.layers.1.self_attn.attn": ("attention", "sdpa_cpu", "highest priority available"),
        "model.layers.2.self_attn.attn": ("attention", "sdpa", "forced by model.layers.2.*=sdpa"),
    }
    assert len(r.fingerprints) == 1
    assert r.mixed_steps(), "no step mixed decodes and prefills: the prompts no longer test that"
    assert any("ctx=[" in s and "q=[1, 1, " in s for s in r.steps)


def test_forced_backend_that_cannot_serve_fails_start_up_with_its_reasons(workdir, checkpoint):
    r = run(workdir, "llama_flash", checkpoint("llama"), {"MIXBOARD_BACKEND": "attention=flash_attn"})
    assert r.rc != 0 and r.ids is None
    assert "backend 'flash_attn' is forced by rule 'attention=flash_attn' but cannot serve layer " \
           "'model.layers.0.self_attn.attn'" in r.log, r.log[-3000:]
    assert "runs on cuda" in r.log  # its reasons, not a fallback to another backend


def test_a_phase_rule_runs_decode_rows_and_prefill_rows_on_their_own_backends(workdir, checkpoint, native):
    r = ok(run(workdir, "llama_phases", checkpoint("llama"), {"MIXBOARD_BACKEND": "attention@decode=sdpa"}))
    assert r.ids == native("llama")
    assert r.mixed_steps(), "no step mixed decodes and prefills: the prompts no longer test that"
    for i in range(3):
        assert re.search(rf"model\.layers\.{i}\.self_attn\.attn\s+attention@prefill\s+sdpa_cpu\s+highest priority",
                         r.log), r.log[-3000:]
        assert re.search(rf"model\.layers\.{i}\.self_attn\.attn\s+attention@decode\s+sdpa\s+forced by "
                         r"attention@decode=sdpa", r.log), r.log[-3000:]


def test_backend_options_reach_the_backend_and_the_fingerprint(workdir, checkpoint, native):
    """MIXBOARD_BACKEND_OPTIONS inside vLLM: checked, part of the fingerprint, and no token changes."""
    path, forced = checkpoint("llama"), {"MIXBOARD_BACKEND": "attention=sdpa"}
    small = ok(run(workdir, "llama_options", path, {**forced, "MIXBOARD_BACKEND_OPTIONS": "sdpa.decode_chunk_mib=1"}))
    default = ok(run(workdir, "llama_options_default", path, forced))
    assert small.ids == default.ids == native("llama")  # a smaller decode workspace changes no token
    assert {backend for _, backend, _ in small.table.values()} == {"sdpa"}
    assert len(set(small.fingerprints.values()) | set(default.fingerprints.values())) == 2


def test_an_option_for_a_backend_vllm_does_not_run_fails_start_up(workdir, checkpoint):
    # vLLM runs its own dense ops: mixboard's products are not planned there, so their options mean nothing
    r = run(workdir, "llama_bad_option", checkpoint("llama"),
            {"MIXBOARD_BACKEND_OPTIONS": "linear_onednn.layout=as_loaded"})
    assert r.rc != 0 and r.ids is None
    assert "names backend 'linear_onednn', which no layer of this model runs: this model has no linear layers" \
        in r.log, r.log[-3000:]


def test_vllm_runs_a_locks_backend_options(workdir, checkpoint, native):
    """A lock with backend options, written by mixboard's runner: vLLM runs its mixers with the lock's
    options of their backends (sdpa's here), and leaves those of the runner's dense ops (linear_onednn's)."""
    import json
    import os
    import subprocess
    import sys

    path = checkpoint("llama")
    lock = os.path.join(workdir, "llama_options.lock")
    made = subprocess.run([sys.executable, "-m", "mixboard_runner", "lock", path, "--backend",
                           "attention=sdpa,linear=linear_onednn", "--backend-option",
                           "sdpa.decode_chunk_mib=8,linear_onednn.layout=as_loaded", "-o", lock, "--force"],
                          capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if not k.startswith("MIXBOARD_")})
    assert made.returncode == 0, made.stderr[-3000:]
    assert json.load(open(lock))["options"] == {"linear_onednn": {"layout": "as_loaded"},
                                                "sdpa": {"decode_chunk_mib": 8}}
    r = ok(run(workdir, "llama_lock_options", path, {"MIXBOARD_LOCK": lock}))
    assert r.ids == native("llama")
    assert re.search(r"model\.layers\.0\.self_attn\.attn\s+attention\s+sdpa\s+forced by lock", r.log), r.log[-3000:]
    r = run(workdir, "llama_lock_and_options", path, {"MIXBOARD_LOCK": lock,
                                                      "MIXBOARD_BACKEND_OPTIONS": "sdpa.decode_chunk_mib=16"})
    assert r.rc != 0 and "unset MIXBOARD_BACKEND, MIXBOARD_PREFER and MIXBOARD_BACKEND_OPTIONS" in r.log, r.log[-3000:]
