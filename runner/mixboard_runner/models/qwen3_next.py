"""Qwen3-Next: pre-norm blocks whose mixer is Gated DeltaNet (``linear_attention``, the kind
``gated_delta_net`` from mixboard-gdn) or gated attention (``full_attention``: a sigmoid gate per head on
the output, q and k normed per head, rotary on part of each head), and whose MLP is routed experts beside
a shared expert scaled by sigmoid(shared_expert_gate(x)), or a dense SwiGLU on the layers
``mlp_only_layers`` and ``decoder_sparse_step`` leave out.

Every RMSNorm outside the DeltaNet (the blocks', the final one, q's and k's) stores weight - 1
(``ZeroCentredRMSNorm``); the DeltaNet's own gated norm stores its weight as it is."""

from __future__ import annotations

import dataclasses

from mixboard import MoESpec

from .blocks import GatedMLP, SigmoidGatedMLP
from .config import ConfigReader, ModelError, show
from .experts import MoE, SparseMLP
from .gdn_layer import GatedDeltaNetLayer, gdn_spec_class
from .llama import attention_from
from .mixers import AttentionLayer
from .model import Block, CausalLM, ModelInfo, Trunk
from .ops import Embedding, ZeroCentredRMSNorm

LAYER_TYPES = ("linear_attention", "full_attention")


def _layer_types(cfg: ConfigReader, n_layers: int) -> list[str]:
    types = cfg.config.get("layer_types")
    if types is None:  # released configs give the interval instead: attention on every interval-th layer
        interval = cfg.size("full_attention_interval", 4)
        return ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n_layers)]
    if not isinstance(types, list) or not all(t in LAYER_TYPES for t in types):
        raise ModelError(f"config.json: 'layer_types' must be a list of 'linear_attention' and 'full_attention', "
                         f"not {show(types)}")
    if len(types) != n_layers:
        raise ModelError(f"config.json: layer_types has {len(types)} entries for {n_layers} layers")
    return types


def _gdn_spec(cfg: ConfigReader, dtype: str):
    k_heads, v_heads = cfg.size("linear_num_key_heads"), cfg.size("linear_num_value_heads")
    cfg.divisible("linear_num_value_heads", v_heads, "linear_num_key_heads", k_heads)
    return cfg.spec(gdn_spec_class(cfg.model_type), num_k_heads=k_heads, num_v_heads=v_heads,
                    head_k_dim=cfg.size("linear_key_head_dim"), head_v_dim=cfg.size("linear_value_head_dim"),
                    d_conv=cfg.size("linear_conv_kernel_dim", 4, low=2, high=64), conv_bias=False,
                    norm_eps=cfg.number("rms_norm_eps", 1e-6, zero_ok=True), dtype=dtype)


def _experts(cfg: ConfigReader, hidden: int, dtype: str) -> MoESpec | None:
    n_experts = cfg.size("num_experts", 0, low=0)
    return n_experts and cfg.spec(MoESpec, hidden_size=hidden, num_experts=n_experts,
                                  top_k=cfg.size("num_experts_per_tok"),
                                  intermediate_size=cfg.size("moe_intermediate_size"), activation="silu",
                                  gating="softmax_topk", normalize_topk=cfg.opt("norm_topk_prob", True), dtype=dtype)


def build(cfg: ConfigReader, dtype: str) -> CausalLM:
    hidden, n_layers = cfg.size("hidden_size"), cfg.layers()
    eps = cfg.number("rms_norm_eps", 1e-6, zero_ok=True)
    types = _layer_types(cfg, n_layers)
    cfg.choice("hidden_act", "silu", ("silu",))
    attn_spec, rotary = attention_from(cfg, dtype, partial_rotary_default=0.25)  # transformers' default here
    # transformers' Qwen3NextAttention attends to the whole context whatever 'sliding_window' says
    attn_spec = dataclasses.replace(attn_spec, sliding_window=None)
    attn_bias = cfg.opt("attention_bias", False)
    gdn_spec = _gdn_spec(cfg, dtype) if "linear_attention" in types else None
    experts = _experts(cfg, hidden, dtype)
    sparse_step = cfg.size("decoder_sparse_step", 1)
    mlp_only = set(cfg.indices("mlp_only_layers"))
    info = ModelInfo("qwen3_next", cfg.size("vocab_size"), hidden,
                     cfg.size("max_position_embeddings", None, high=None), cfg.eos_ids())
    tie = cfg.opt("tie_word_embeddings", False)
    blocks = []
    for i, layer_type in enumerate(types):
        name = f"model.layers.{i}"
        if layer_type == "full_attention":
            mixer_name = "self_attn"
            mixer = AttentionLayer(f"{name}.self_attn", hidden, attn_spec, rotary, bias=attn_bias, qk_norm_eps=eps,
                                   qk_norm=(ZeroCentredRMSNorm, "q_norm", "k_norm"), output_gate=True)
        else:
            mixer_name, mixer = "linear_attn", GatedDeltaNetLayer(f"{name}.linear_attn", hidden, gdn_spec)
        if experts and i not in mlp_only and (i + 1) % sparse_step == 0:  # as transformers' Qwen3NextDecoderLayer
            shared = GatedMLP(f"{name}.mlp.shared_expert", hidden, cfg.size("shared_expert_intermediate_size"), dtype)
            mlp = SparseMLP(MoE.per_expert(f"{name}.mlp.experts", experts, router="gate"),
                            SigmoidGatedMLP(f"{name}.mlp", shared, hidden, dtype), names=("", ""))
        else:
            mlp = GatedMLP(f"{name}.mlp", hidden, cfg.size("intermediate_size"), dtype)
        blocks.append(Block(("input_layernorm", mixer_name, "post_attention_layernorm", "mlp"),
                            ZeroCentredRMSNorm(f"{name}.input_layernorm", hidden, eps, dtype), mixer,
                            ZeroCentredRMSNorm(f"{name}.post_attention_layernorm", hidden, eps, dtype), mlp))
    trunk = Trunk(("embed_tokens", "norm"), Embedding("model.embed_tokens", info.vocab_size, hidden, dtype, tie),
                  blocks, ZeroCentredRMSNorm("model.norm", hidden, eps, dtype))
    model = CausalLM(info, "model", trunk, tie, dtype)
    model.unused_prefixes = ("mtp.",)  # released checkpoints carry a multi-token prediction head; not run here
    return model
