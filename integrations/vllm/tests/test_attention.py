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
