"""Llama: attention + SwiGLU MLP blocks."""

from __future__ import annotations

from torch import nn

from mixboard import AttentionSpec

from .blocks import GatedMLP, RMSNorm, Rotary
from .config import ConfigReader
from .mixers import AttentionLayer
from .model import Block, CausalLM, ModelInfo, Trunk


def attention_from(cfg: ConfigReader, dtype: str) -> tuple[AttentionSpec, Rotary]:
    hidden, heads = cfg.req("hidden_size"), cfg.req("num_attention_heads")
    head_size = cfg.opt("head_dim", hidden // heads, int)
    spec = AttentionSpec(num_heads=heads, num_kv_heads=cfg.opt("num_key_value_heads", heads, int),
                         head_size=head_size, dtype=dtype, sliding_window=cfg.opt("sliding_window", None, int))
    theta, scaling, partial = cfg.rope()
    return spec, Rotary(head_size, theta, int(head_size * partial), scaling)


def build(cfg: ConfigReader, dtype: str) -> CausalLM:
    hidden, eps = cfg.req("hidden_size"), cfg.opt("rms_norm_eps", 1e-6, float)
    spec, rotary = attention_from(cfg, dtype)
    bias, mlp_bias = cfg.opt("attention_bias", False), cfg.opt("mlp_bias", False)
    blocks = []
    for i in range(cfg.req("num_hidden_layers")):
        name = f"model.layers.{i}"
        blocks.append(Block(
            "input_layernorm", RMSNorm(hidden, eps),
            "self_attn", AttentionLayer(f"{name}.self_attn", hidden, spec, rotary, bias=bias),
            "post_attention_layernorm", RMSNorm(hidden, eps),
            "mlp", GatedMLP(hidden, cfg.req("intermediate_size"), bias=mlp_bias),
        ))
    info = ModelInfo("llama", cfg.req("vocab_size"), hidden, cfg.opt("max_position_embeddings", None, int), cfg.eos_ids())
    trunk = Trunk("embed_tokens", nn.Embedding(info.vocab_size, hidden), blocks, "norm", RMSNorm(hidden, eps))
    return CausalLM(info, "model", trunk, cfg.opt("tie_word_embeddings", False))
