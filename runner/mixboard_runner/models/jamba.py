"""Jamba: blocks of one mixer and one MLP, x = x + mixer(norm(x)), then
x = x + mlp(norm(x)). The mixer is attention (no positional embedding) on
layers i with i % attn_layer_period == attn_layer_offset, else Mamba (v1)
whose dt, B and C are RMS-normalized after x_proj (the mamba1 kind's
dt_bc_norms); the MLP is routed SwiGLU experts (softmax over all experts,
then the top k, not renormalized) on layers i % expert_layer_period ==
expert_layer_offset, else a dense SwiGLU."""

from __future__ import annotations

import math

from mixboard import AttentionSpec, Mamba1Spec, MoESpec

from .blocks import GatedMLP
from .config import ConfigReader, ModelError
from .experts import MoE, SparseMLP
from .mixers import AttentionLayer, Mamba1Layer
from .model import Block, CausalLM, ModelInfo, Trunk
from .ops import Embedding, RMSNorm


def _every(cfg: ConfigReader, what: str, n_layers: int, period: int, offset: int) -> list[bool]:
    """Which layers are ``what`` (attn or expert): i % <what>_layer_period == <what>_layer_offset
    (``period`` and ``offset``: transformers' defaults, where the config has none)."""
    period = cfg.size(f"{what}_layer_period", period)
    offset = cfg.size(f"{what}_layer_offset", offset, low=0)
    if offset >= period:
        raise ModelError(f"config.json: '{what}_layer_offset' ({offset}) must be below "
                         f"'{what}_layer_period' ({period})")
    return [i % period == offset for i in range(n_layers)]


def build(cfg: ConfigReader, dtype: str) -> CausalLM:
    hidden, n_layers = cfg.size("hidden_size"), cfg.layers()
    eps = cfg.number("rms_norm_eps", 1e-6, zero_ok=True)
    cfg.choice("hidden_act", "silu", ("silu",))
    attention, experts_here = _every(cfg, "attn", n_layers, 8, 4), _every(cfg, "expert", n_layers, 2, 1)
    heads = cfg.size("num_attention_heads")
    kv_heads = cfg.size("num_key_value_heads", heads)
    cfg.divisible("num_attention_heads", heads, "num_key_value_heads", kv_heads)
    head_size = cfg.size("head_dim", None)
    if head_size is None:
        cfg.divisible("hidden_size", hidden, "num_attention_heads", heads, " (head_dim is not given)")
        head_size = hidden // heads
    # full causal attention: transformers' Jamba applies neither rotary embedding nor a sliding window
    attn_spec = cfg.spec(AttentionSpec, num_heads=heads, num_kv_heads=kv_heads, head_size=head_size, dtype=dtype)
    rank = cfg.config.get("mamba_dt_rank", "auto")
    rank = math.ceil(hidden / 16) if rank == "auto" else cfg.size("mamba_dt_rank")
    d_inner = cfg.derived("mamba_expand x hidden_size", cfg.size("mamba_expand", 2) * hidden)
    ssm_spec = cfg.spec(Mamba1Spec, d_inner=d_inner,
                        d_state=cfg.size("mamba_d_state", 16), d_conv=cfg.size("mamba_d_conv", 4, low=2), dt_rank=rank,
                        conv_bias=cfg.opt("mamba_conv_bias", True), dt_bc_norms=True, norm_eps=eps, dtype=dtype)
    proj_bias, mlp = cfg.opt("mamba_proj_bias", False), cfg.size("intermediate_size")
    n_experts = cfg.size("num_experts", 16)
    experts = n_experts > 1 and cfg.spec(MoESpec, hidden_size=hidden, num_experts=n_experts,
                                         top_k=cfg.size("num_experts_per_tok", 2), intermediate_size=mlp,
                                         activation="silu", gating="softmax_topk", normalize_topk=False, dtype=dtype)
    info = ModelInfo("jamba", cfg.size("vocab_size"), hidden, cfg.size("max_position_embeddings", None, high=None),
                     cfg.eos_ids())
    tie = cfg.opt("tie_word_embeddings", False)
    blocks = []
    for i in range(n_layers):
        name = f"model.layers.{i}"
        if attention[i]:
            mixer_name, mixer = "self_attn", AttentionLayer(f"{name}.self_attn", hidden, attn_spec, None)
        else:
            mixer_name, mixer = "mamba", Mamba1Layer(f"{name}.mamba", hidden, ssm_spec, bias=proj_bias)
        if experts and experts_here[i]:
            ffn = SparseMLP(MoE.per_expert(f"{name}.feed_forward.experts", experts, router="router"))
        else:
            ffn = GatedMLP(f"{name}.feed_forward", hidden, mlp, dtype)
        blocks.append(Block(("input_layernorm", mixer_name, "pre_ff_layernorm", "feed_forward"),
                            RMSNorm(f"{name}.input_layernorm", hidden, eps, dtype), mixer,
                            RMSNorm(f"{name}.pre_ff_layernorm", hidden, eps, dtype), ffn))
    trunk = Trunk(("embed_tokens", "final_layernorm"),
                  Embedding("model.embed_tokens", info.vocab_size, hidden, dtype, tie), blocks,
                  RMSNorm("model.final_layernorm", hidden, eps, dtype))
    return CausalLM(info, "model", trunk, tie, dtype)
