"""Bamba: attention (partial rotary) and Mamba-2 blocks, each with a SwiGLU MLP."""

from __future__ import annotations

from torch import nn

from .blocks import GatedMLP, RMSNorm
from .config import ConfigReader
from .llama import attention_from
from .mamba2 import mamba2_spec
from .mixers import AttentionLayer, Mamba2Layer
from .model import Block, CausalLM, ModelInfo, Trunk


def build(cfg: ConfigReader, dtype: str) -> CausalLM:
    hidden, eps = cfg.req("hidden_size"), cfg.opt("rms_norm_eps", 1e-5, float)
    attn_layers = set(cfg.opt("attn_layer_indices", [], list))
    attn_spec, rotary = attention_from(cfg, dtype)
    ssm_spec = mamba2_spec(cfg, dtype, heads="mamba_n_heads", head_dim="mamba_d_head", d_state="mamba_d_state",
                           groups="mamba_n_groups", conv="mamba_d_conv", chunk="mamba_chunk_size",
                           conv_bias="mamba_conv_bias", expand="mamba_expand", eps="rms_norm_eps")
    proj_bias, attn_bias = cfg.opt("mamba_proj_bias", False), cfg.opt("attention_bias", False)
    blocks = []
    for i in range(cfg.req("num_hidden_layers")):
        name = f"model.layers.{i}"
        if i in attn_layers:
            mixer_name, mixer = "self_attn", AttentionLayer(f"{name}.self_attn", hidden, attn_spec, rotary, bias=attn_bias)
        else:
            mixer_name, mixer = "mamba", Mamba2Layer(f"{name}.mamba", hidden, ssm_spec, bias=proj_bias)
        blocks.append(Block("input_layernorm", RMSNorm(hidden, eps), mixer_name, mixer, "pre_ff_layernorm",
                            RMSNorm(hidden, eps), "feed_forward",
                            GatedMLP(hidden, cfg.req("intermediate_size"), bias=cfg.opt("mlp_bias", False))))
    info = ModelInfo("bamba", cfg.req("vocab_size"), hidden, cfg.opt("max_position_embeddings", None, int), cfg.eos_ids())
    trunk = Trunk("embed_tokens", nn.Embedding(info.vocab_size, hidden), blocks, "final_layernorm", RMSNorm(hidden, eps))
    return CausalLM(info, "model", trunk, cfg.opt("tie_word_embeddings", False))
