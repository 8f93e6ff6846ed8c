"""LFM2: attention (with per-head q/k norm) and gated short-conv blocks, each with a SwiGLU MLP."""

from __future__ import annotations

from torch import nn

from mixboard import ShortConvSpec

from .blocks import GatedMLP, RMSNorm
from .config import ConfigReader, ModelError
from .llama import attention_from
from .mixers import AttentionLayer, ShortConvLayer
from .model import Block, CausalLM, ModelInfo, Trunk


def _mlp_size(cfg: ConfigReader) -> int:
    size = cfg.req("intermediate_size")
    if cfg.opt("block_auto_adjust_ff_dim", True):
        size = int(2 * size / 3)
        multiplier = cfg.config.get("block_ffn_dim_multiplier")
        if multiplier is not None:
            size = int(multiplier * size)
            multiple = cfg.opt("block_multiple_of", 256, int)
            size = multiple * ((size + multiple - 1) // multiple)
    return size


def build(cfg: ConfigReader, dtype: str) -> CausalLM:
    hidden, eps = cfg.req("hidden_size"), cfg.opt("norm_eps", 1e-5, float)
    n_layers = cfg.req("num_hidden_layers")
    types = cfg.config.get("layer_types")
    if types is None:
        attn = set(cfg.opt("full_attn_idxs", [], list))
        types = ["full_attention" if i in attn else "conv" for i in range(n_layers)]
    if len(types) != n_layers:
        raise ModelError(f"config.json: layer_types has {len(types)} entries for {n_layers} layers")
    attn_spec, rotary = attention_from(cfg, dtype)
    conv_spec = ShortConvSpec(hidden_size=hidden, conv_width=cfg.opt("conv_L_cache", 3, int),
                              conv_bias=cfg.opt("conv_bias", False), dtype=dtype)
    blocks = []
    for i, layer_type in enumerate(types):
        name = f"model.layers.{i}"
        if layer_type == "conv":
            mixer_name, mixer = "conv", ShortConvLayer(f"{name}.conv", hidden, conv_spec)
        else:
            mixer_name = "self_attn"
            mixer = AttentionLayer(f"{name}.self_attn", hidden, attn_spec, rotary, out_name="out_proj", qk_norm_eps=eps)
        blocks.append(Block("operator_norm", RMSNorm(hidden, eps), mixer_name, mixer, "ffn_norm", RMSNorm(hidden, eps),
                            "feed_forward", GatedMLP(hidden, _mlp_size(cfg), names=("w1", "w3", "w2"))))
    info = ModelInfo("lfm2", cfg.req("vocab_size"), hidden, cfg.opt("max_position_embeddings", None, int), cfg.eos_ids())
    trunk = Trunk("embed_tokens", nn.Embedding(info.vocab_size, hidden), blocks, "embedding_norm", RMSNorm(hidden, eps))
    return CausalLM(info, "model", trunk, cfg.opt("tie_word_embeddings", True))
