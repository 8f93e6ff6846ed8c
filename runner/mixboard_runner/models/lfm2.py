"""LFM2: attention (with per-head q/k norm) and gated short-conv blocks, each with a SwiGLU MLP."""

from __future__ import annotations

from mixboard import ShortConvSpec

from .blocks import GatedMLP
from .config import ConfigReader, ModelError, show
from .llama import attention_from
from .mixers import AttentionLayer, ShortConvLayer
from .model import Block, CausalLM, ModelInfo, Trunk
from .ops import Embedding, RMSNorm

LAYER_TYPES = ("conv", "full_attention")


def _mlp_size(cfg: ConfigReader) -> int:
    size = cfg.size("intermediate_size")
    if not cfg.opt("block_auto_adjust_ff_dim", True):
        return size
    what = "the feed-forward size (intermediate_size x 2/3"
    size = int(2 * size / 3)
    multiplier = cfg.number("block_ffn_dim_multiplier", None)
    if multiplier is not None:
        multiple = cfg.size("block_multiple_of", 256)
        what += " x block_ffn_dim_multiplier, rounded up to block_multiple_of"
        size = cfg.derived(what + ")", multiplier * size)
        size = multiple * ((size + multiple - 1) // multiple)
    return cfg.derived(what + ")", size)


def _layer_types(cfg: ConfigReader, n_layers: int) -> list[str]:
    types = cfg.config.get("layer_types")
    if types is None:
        attn = set(cfg.indices("full_attn_idxs"))
        return ["full_attention" if i in attn else "conv" for i in range(n_layers)]
    if not isinstance(types, list) or not all(isinstance(t, str) and t in LAYER_TYPES for t in types):
        wanted = " or ".join(map(repr, LAYER_TYPES))
        raise ModelError(f"config.json: 'layer_types' must be a list of {wanted}, not {show(types)}")
    if len(types) != n_layers:
        raise ModelError(f"config.json: layer_types has {len(types)} entries for {n_layers} layers")
    return types


def build(cfg: ConfigReader, dtype: str) -> CausalLM:
    hidden, n_layers = cfg.size("hidden_size"), cfg.layers()
    eps = cfg.number("norm_eps", 1e-5, zero_ok=True)
    types = _layer_types(cfg, n_layers)
    attn_spec, rotary = attention_from(cfg, dtype)
    conv_spec = cfg.spec(ShortConvSpec, hidden_size=hidden, conv_width=cfg.size("conv_L_cache", 3, low=2),
                         conv_bias=cfg.opt("conv_bias", False), dtype=dtype)
    mlp = _mlp_size(cfg)
    info = ModelInfo("lfm2", cfg.size("vocab_size"), hidden, cfg.size("max_position_embeddings", None, high=None),
                     cfg.eos_ids())
    tie = cfg.opt("tie_word_embeddings", True)
    blocks = []
    for i, layer_type in enumerate(types):
        name = f"model.layers.{i}"
        if layer_type == "conv":
            mixer_name, mixer = "conv", ShortConvLayer(f"{name}.conv", hidden, conv_spec)
        else:
            mixer_name = "self_attn"
            mixer = AttentionLayer(f"{name}.self_attn", hidden, attn_spec, rotary, out_name="out_proj", qk_norm_eps=eps)
        blocks.append(Block(("operator_norm", mixer_name, "ffn_norm", "feed_forward"),
                            RMSNorm(f"{name}.operator_norm", hidden, eps, dtype), mixer,
                            RMSNorm(f"{name}.ffn_norm", hidden, eps, dtype),
                            GatedMLP(f"{name}.feed_forward", hidden, mlp, dtype, names=("w1", "w3", "w2"))))
    trunk = Trunk(("embed_tokens", "embedding_norm"), Embedding("model.embed_tokens", info.vocab_size, hidden, dtype, tie),
                  blocks, RMSNorm("model.embedding_norm", hidden, eps, dtype))
    return CausalLM(info, "model", trunk, tie, dtype)
