"""Jamba through vLLM with mixboard: vLLM's CPU build has no Mamba1 of its own, so its Mamba
layers (dt, B and C RMS-normalized: the mamba1 kind's dt_bc_norms) run only on mixboard's mamba1
kind, its attention on mixboard too, its experts and MLPs on vLLM. One engine in vLLM's default
(compiled) mode, steps that mix decodes with fresh, chunked and continuing prefills; its greedy ids
must equal transformers' (a plain argmax loop, hf_ids)."""

import os

import pytest
import torch

from decided import FLOAT32_SSM, decided_prompts, round_to_bf16, ssm_state_in_float32
from harness import ok, run
from hf_ids import hf_ids

# vLLM's layer names -> kind: Mamba on even layers, attention on odd ones
MIXERS = {"model.layers.0.mixer": "mamba1", "model.layers.1.attn": "attention",
          "model.layers.2.mixer": "mamba1", "model.layers.3.attn": "attention"}


def write_jamba(path: str, bf16_weights: bool = False, **config) -> None:
    """Four layers: Mamba with its dt/B/C norms (weights away from 1), attention without positional
    embedding on odd layers, four routed experts (router away from ties) on odd layers, MLPs elsewhere.
    ``config`` overrides the config's values; ``bf16_weights`` rounds every weight to bfloat16."""
    from transformers import JambaConfig, JambaForCausalLM

    torch.manual_seed(0)
    cfg = JambaConfig(**{**dict(
        vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1,
        num_experts=4, num_experts_per_tok=2, mamba_d_state=16, mamba_d_conv=4, mamba_expand=2, mamba_dt_rank=8,
        rms_norm_eps=1e-5, use_mamba_kernels=False, max_position_embeddings=512, initializer_range=0.08,
        tie_word_embeddings=False), **config})
    model = JambaForCausalLM(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".D"):
                p.uniform_(-0.5, 0.5)
            if name.endswith(("dt_layernorm.weight", "b_layernorm.weight", "c_layernorm.weight")):
                p.uniform_(0.5, 1.5)
            if name.endswith("router.weight"):
                p.normal_(0, 0.5)
    if bf16_weights:
        round_to_bf16(model)
    model.save_pretrained(path)


@pytest.fixture(scope="module")
def jamba(workdir):
    path = os.path.join(workdir, "jamba")
    write_jamba(path)
    return path, ok(run(workdir, "jamba", path, extra={"enforce_eager": False}))  # vLLM's default: compiled


def test_jamba_with_mixboard_equals_transformers(jamba):
    path, r = jamba
    table = r.table
    assert {layer: kind for layer, (kind, _, _) in table.items()} == MIXERS
    # mamba1_cpu's C decode step applies the dt/B/C norms: it serves the layers (mamba1_torch's code for prefills)
    assert {backend for kind, backend, _ in table.values() if kind == "mamba1"} == {"mamba1_cpu"}
    assert r.mixed_steps()
    assert "DYNAMO_TRACE_ONCE" in r.log, "vLLM did not compile the model"
    assert r.ids == hf_ids(path)


def test_jamba_bf16_with_mixboard_equals_transformers_float32(workdir):
    """In bfloat16 (vLLM's default, compiled), vLLM's CPU platform keeps the Mamba SSM state in float32
    and the conv state in bfloat16: the mamba1 kind takes both (state_dtype, conv_state_dtype). vLLM alone
    has no Mamba1 on CPU, so the ids are held to transformers' float32 ones, on prompts that bfloat16
    rounding cannot decide (decided.py), every expert routed (no discrete routing to flip)."""
    path = os.path.join(workdir, "jamba_bf16")
    write_jamba(path, bf16_weights=True, num_experts_per_tok=4)
    chosen = decided_prompts(path, vocab=256, new_tokens=4, margin=0.4, candidates=1024)
    r = ok(run(workdir, "jamba_bf16", path, extra={"enforce_eager": False, "dtype": "bfloat16"},
               prompts=[[p, 4] for p, _ in chosen]))
    assert "DYNAMO_TRACE_ONCE" in r.log, "vLLM did not compile the model"
    assert r.mixed_steps()
    mamba = {backend for kind, backend, _ in r.table.values() if kind == "mamba1"}
    if ssm_state_in_float32():  # the mixed layout is what runs, its decodes on mamba1_cpu's C step
        assert FLOAT32_SSM in r.log and mamba == {"mamba1_cpu"}
    else:
        assert mamba == {"mamba1_torch"}
    assert r.ids == [ids for _, ids in chosen]
