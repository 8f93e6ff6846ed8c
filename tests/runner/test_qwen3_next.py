"""Qwen3-Next (Gated DeltaNet from mixboard-gdn, gated attention, experts beside a gated shared expert, a
dense MLP layer) against transformers' Qwen3NextForCausalLM, as test_parity holds the other architectures:
teacher-forced logits at every position, batched generation equal to each prompt alone, greedy tokens equal
to transformers'; and the one-line refusals (the plugin absent, a setting not served)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

import transformers
from mixboard_runner.engine import Engine
from mixboard_runner.sampling import SamplingParams

from test_parity import PORTABLE, reference_greedy, reference_logits

VOCAB = 160


def qwen3_next_config(**changes):
    # two value heads per key head (the per-key-head interleaving of in_proj_qkvz/ba matters), partial rotary
    # (transformers' default factor 0.25 of head_dim 32), experts on layers 0, 1 and 3, a dense MLP on layer 2
    values = {"tie_word_embeddings": False, "mlp_only_layers": [2], "linear_num_value_heads": 4, **changes}
    return transformers.Qwen3NextConfig(
        vocab_size=VOCAB, hidden_size=64, initializer_range=0.1, num_hidden_layers=4,
        layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, intermediate_size=96, num_experts=4,
        num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=48,
        linear_num_key_heads=2, linear_key_head_dim=16, linear_value_head_dim=24,
        linear_conv_kernel_dim=4, max_position_embeddings=512, rms_norm_eps=1e-6, **values)


def variant_config():
    # experts every second layer (decoder_sparse_step), one value head per key head, attention biases, tied head
    return qwen3_next_config(decoder_sparse_step=2, mlp_only_layers=[], linear_num_value_heads=2,
                             attention_bias=True, tie_word_embeddings=True)


def _made(directory, config):
    torch.manual_seed(0)
    config._attn_implementation = "eager"
    model = transformers.Qwen3NextForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):  # zero-centred norms made at 0 would hide a missing (1 + w)
                p.uniform_(-0.5, 0.5)
            if name.endswith("dt_bias"):
                p.uniform_(-0.5, 0.5)
            if name.endswith("mlp.gate.weight"):  # a router made with zeros would tie every expert
                p.normal_(0, 0.5)
    model.save_pretrained(directory)
    return directory, model


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return _made(tmp_path_factory.mktemp("qwen3_next"), qwen3_next_config())


def test_a_variant_matches_transformers(tmp_path):
    directory, reference = _made(tmp_path, variant_config())
    assert reference.config.tie_word_embeddings and reference.model.layers[1].self_attn.q_proj.bias is not None
    mlps = [type(layer.mlp).__name__ for layer in reference.model.layers]
    assert mlps == ["Qwen3NextMLP", "Qwen3NextSparseMoeBlock"] * 2
    engine = Engine(directory, cache_memory=32 * 2**20)
    torch.manual_seed(1)
    ids = torch.randint(0, VOCAB, (29,)).tolist()
    expected = reference_logits(reference, ids)
    for prefix_len in (0, 13, len(ids)):
        err = (engine.score(ids, prefix_len) - expected).abs().max().item()
        assert err <= 1e-4, f"prefix_len={prefix_len}: max abs error {err:.2e}"


@pytest.mark.parametrize("dense", ["planned", "portable"])
def test_score_matches_transformers_at_every_position(checkpoint, dense):
    directory, reference = checkpoint
    engine = Engine(directory, cache_memory=32 * 2**20, backend=PORTABLE if dense == "portable" else "")
    kinds = {layer.kind for layer in engine.plan.layers}
    assert {"gated_delta_net", "attention", "moe", "rotary"} <= kinds
    if dense == "portable":
        assert {layer.backend for layer in engine.plan.layers if layer.selection.rule} >= {"linear_torch",
                                                                                           "rms_norm_torch"}
    torch.manual_seed(1)
    ids = torch.randint(0, VOCAB, (29,)).tolist()
    expected = reference_logits(reference, ids)
    assert expected.abs().max() > 0.1  # the comparison below is not trivially small
    for prefix_len in (0, 13, len(ids)):
        got = engine.score(ids, prefix_len)
        err = (got - expected).abs().max().item()
        assert err <= 1e-4, f"prefix_len={prefix_len}: max abs error {err:.2e}"
    assert engine.cache.all_free()


def test_batched_greedy_generation_equals_each_prompt_alone(checkpoint):
    directory, _ = checkpoint
    engine = Engine(directory, cache_memory=32 * 2**20, max_batched_tokens=40)  # forces chunked prefills
    torch.manual_seed(2)
    prompts = [torch.randint(0, VOCAB, (n,)).tolist() for n in (1, 3, 7, 12, 20, 33, 48, 5)]
    params = SamplingParams(max_tokens=6, ignore_eos=True)
    together = [o.output_ids for o in engine.generate(prompts, params)]
    alone = [engine.generate([p], params)[0].output_ids for p in prompts]
    assert together == alone
    assert all(len(o) == 6 for o in together)
    assert engine.cache.all_free()


def test_greedy_generation_matches_transformers(checkpoint):
    directory, reference = checkpoint
    engine = Engine(directory, cache_memory=32 * 2**20, max_batched_tokens=24)
    torch.manual_seed(3)
    prompts = [torch.randint(0, VOCAB, (n,)).tolist() for n in (2, 9, 30, 17)]
    got = [o.output_ids for o in engine.generate(prompts, SamplingParams(max_tokens=5, ignore_eos=True))]
    assert got == [reference_greedy(reference, p, 5) for p in prompts]
    assert engine.cache.all_free()


def test_a_released_config_layout_loads_and_matches(checkpoint, tmp_path):
    # released Qwen3-Next configs give full_attention_interval instead of layer_types and may leave the
    # partial rotary factor to transformers' default (0.25); their checkpoints carry an mtp.* head, unused;
    # a sliding_window there means nothing to this model
    directory, reference = checkpoint
    config = json.loads((directory / "config.json").read_text())
    del config["layer_types"]
    config["full_attention_interval"] = 2  # attention on layers 1 and 3, as layer_types said
    config["rope_parameters"].pop("partial_rotary_factor")
    assert "partial_rotary_factor" not in config
    config["sliding_window"] = 8  # a field transformers' Qwen3NextAttention does not read: full attention still
    (tmp_path / "config.json").write_text(json.dumps(config))
    state = load_file(directory / "model.safetensors")
    state["mtp.fc.weight"] = torch.ones(64, 128)
    save_file(state, tmp_path / "model.safetensors")
    engine = Engine(tmp_path, cache_memory=32 * 2**20)
    torch.manual_seed(1)
    ids = torch.randint(0, VOCAB, (29,)).tolist()
    err = (engine.score(ids, 0) - reference_logits(reference, ids)).abs().max().item()
    assert err <= 1e-4, f"max abs error {err:.2e}"


def _run(directory, env=None):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MIXBOARD_")}
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "mixboard_runner", "run", str(directory), "--prompt-ids", "1,2"],
                          capture_output=True, text=True, env=environ)


def _one_line(out, message):
    assert out.returncode == 2, out.stderr
    assert len(out.stderr.splitlines()) == 1 and "Traceback" not in out.stderr, out.stderr
    assert message in out.stderr, out.stderr


def test_without_mixboard_gdn_the_load_is_refused_in_one_line(checkpoint):
    directory, _ = checkpoint
    _one_line(_run(directory, {"MIXBOARD_DISABLE_PLUGINS": "gdn"}), "pip install mixboard-gdn (or ./plugins/gdn)")


@pytest.mark.parametrize("key, value", [("hidden_act", "gelu"), ("layer_types", ["linear_attention"] * 3 + ["mamba"])])
def test_a_setting_it_does_not_serve_is_refused_in_one_line(checkpoint, tmp_path, key, value):
    directory, _ = checkpoint
    config = json.loads((directory / "config.json").read_text())
    config[key] = value
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors").symlink_to(directory / "model.safetensors")
    _one_line(_run(tmp_path), repr(key))
