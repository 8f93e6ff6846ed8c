"""Bamba: attention (partial rotary) and Mamba-2 blocks, each with a SwiGLU MLP."""

from __future__ import annotations

from .blocks import GatedMLP
from .config import ConfigReader
from .llama import attention_from
from .mamba2 import mamba2_spec
from .mixers import AttentionLayer, Mamba2Layer
from .model import Block, CausalLM, ModelInfo, Trunk
from .ops import Embedding, RMSNorm


def build(cfg: ConfigReader, dtype: str) -> CausalLM:
    hidden, n_layers, mlp = cfg.size("hidden_size"), cfg.layers(), cfg.size("intermediate_size")
    eps = cfg.number("rms_norm_eps", 1e-5, zero_ok=True)
    attn_layers = set(cfg.indices("attn_layer_indices"))
    attn_spec, rotary = attention_from(cfg, dtype)
    ssm_spec = mamba2_spec(cfg, dtype, heads="mamba_n_heads", head_dim="mamba_d_head", d_state="mamba_d_state",
                           groups="mamba_n_groups", conv="mamba_d_conv", chunk="mamba_chunk_size",
                           conv_bias="mamba_conv_bias", expand="mamba_expand", eps="rms_norm_eps")
    proj_bias, attn_bias = cfg.opt("mamba_proj_bias", False), cfg.opt("attention_bias", False)
    mlp_bias = cfg.opt("mlp_bias", False)
    info = ModelInfo("bamba", cfg.size("vocab_size"), hidden, cfg.size("max_position_embeddings", None, high=None),
                     cfg.eos_ids())
    tie = cfg.opt("tie_word_embeddings", False)
    blocks = []
    for i in range(n_layers):
        name = f"model.layers.{i}"
        if i in attn_layers:
            mixer_name = "self_attn"
            mixer = AttentionLayer(f"{name}.self_attn", hidden, attn_spec, rotary, bias=attn_bias)
        else:
            mixer_name, mixer = "mamba", Mamba2Layer(f"{name}.mamba", hidden, ssm_spec, bias=proj_bias)
        blocks.append(Block(("input_layernorm", mixer_name, "pre_ff_layernorm", "feed_forward"),
                            RMSNorm(f"{name}.input_layernorm", hidden, eps, dtype), mixer,
                            RMSNorm(f"{name}.pre_ff_layernorm", hidden, eps, dtype),
                            GatedMLP(f"{name}.feed_forward", hidden, mlp, dtype, bias=mlp_bias)))
    trunk = Trunk(("embed_tokens", "final_layernorm"), Embedding("model.embed_tokens", info.vocab_size, hidden, dtype, tie),
                  blocks, RMSNorm("model.final_layernorm", hidden, eps, dtype))
    return CausalLM(info, "model", trunk, tie, dtype)
