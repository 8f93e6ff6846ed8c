"""Llama: attention + SwiGLU MLP blocks."""

from __future__ import annotations

from mixboard import AttentionSpec

from .blocks import GatedMLP
from .config import ConfigReader
from .mixers import AttentionLayer
from .model import Block, CausalLM, ModelInfo, Trunk
from .ops import Embedding, RMSNorm, Rotary


def attention_from(cfg: ConfigReader, dtype: str, rotary_name: str = "model.rotary_emb",
                   partial_rotary_default: float = 1.0) -> tuple[AttentionSpec, Rotary]:
    """The attention spec and its rotary embedding (one op for every layer), every value checked."""
    hidden, heads = cfg.size("hidden_size"), cfg.size("num_attention_heads")
    kv_heads = cfg.size("num_key_value_heads", heads)
    cfg.divisible("num_attention_heads", heads, "num_key_value_heads", kv_heads)
    head_size = cfg.size("head_dim", None)
    if head_size is None:
        cfg.divisible("hidden_size", hidden, "num_attention_heads", heads, " (head_dim is not given)")
        head_size = hidden // heads
    cfg.derived("num_attention_heads x head_dim", heads * head_size)
    window = cfg.size("sliding_window", None, high=None)
    theta, scaling, rotary_dim = cfg.rope(head_size, partial_rotary_default)
    spec = cfg.spec(AttentionSpec, num_heads=heads, num_kv_heads=kv_heads, head_size=head_size, dtype=dtype,
                    sliding_window=window)
    return spec, Rotary(rotary_name, head_size, theta, dtype, rotary_dim, scaling)


def build(cfg: ConfigReader, dtype: str) -> CausalLM:
    hidden, n_layers, mlp = cfg.size("hidden_size"), cfg.layers(), cfg.size("intermediate_size")
    eps = cfg.number("rms_norm_eps", 1e-6, zero_ok=True)
    spec, rotary = attention_from(cfg, dtype)
    bias, mlp_bias = cfg.opt("attention_bias", False), cfg.opt("mlp_bias", False)
    info = ModelInfo("llama", cfg.size("vocab_size"), hidden, cfg.size("max_position_embeddings", None, high=None),
                     cfg.eos_ids())
    tie = cfg.opt("tie_word_embeddings", False)
    blocks = []
    for i in range(n_layers):
        name = f"model.layers.{i}"
        blocks.append(Block(
            ("input_layernorm", "self_attn", "post_attention_layernorm", "mlp"),
            RMSNorm(f"{name}.input_layernorm", hidden, eps, dtype),
            AttentionLayer(f"{name}.self_attn", hidden, spec, rotary, bias=bias),
            RMSNorm(f"{name}.post_attention_layernorm", hidden, eps, dtype),
            GatedMLP(f"{name}.mlp", hidden, mlp, dtype, bias=mlp_bias),
        ))
    trunk = Trunk(("embed_tokens", "norm"), Embedding("model.embed_tokens", info.vocab_size, hidden, dtype, tie), blocks,
                  RMSNorm("model.norm", hidden, eps, dtype))
    return CausalLM(info, "model", trunk, tie, dtype)
