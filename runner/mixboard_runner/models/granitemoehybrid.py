"""Granite 4 (GraniteMoeHybrid): Bamba's blocks, Mamba-2 or attention, whose
MLP is routed experts beside a shared SwiGLU expert (or the shared one
alone, where num_local_experts is 0):

    x = x + residual_multiplier * mixer(norm(x))
    x = x + residual_multiplier * (experts(norm(x)) + shared(norm(x)))

The multipliers (embedding, residual, logits_scaling) scale linear maps'
outputs and are folded into the weights once loaded; attention_multiplier
is the attention's softmax scale (the kind's ``scale``)."""

from __future__ import annotations

import dataclasses

import torch
from mixboard import MoESpec

from .blocks import PackedGatedMLP
from .config import ConfigReader, ModelError, show
from .experts import MoE, SparseMLP
from .llama import attention_from
from .mamba2 import mamba2_spec
from .mixers import AttentionLayer, Mamba2Layer
from .model import Block, CausalLM, ModelInfo, Trunk
from .ops import Embedding, RMSNorm

MAMBA, ATTENTION = ("linear_attention", "mamba"), ("full_attention", "attention")  # transformers 5's, then older


def _layer_types(cfg: ConfigReader, n_layers: int) -> list[str]:
    types = cfg.config.get("layer_types")
    if not isinstance(types, list) or not all(t in MAMBA + ATTENTION for t in types):
        raise ModelError(f"config.json: 'layer_types' must be a list of 'linear_attention' (or 'mamba') and "
                         f"'full_attention' (or 'attention'), not {show(types)}")
    if len(types) != n_layers:
        raise ModelError(f"config.json: layer_types has {len(types)} entries for {n_layers} layers")
    return types


class GraniteMoeHybrid(CausalLM):
    def __init__(self, *args, embedding: float, residual: float, logits_scaling: float, **kwargs):
        super().__init__(*args, **kwargs)
        self.multipliers = (embedding, residual, logits_scaling)

    @torch.no_grad()
    def finalize(self) -> None:
        embedding, residual, logits_scaling = self.multipliers
        for block in self.trunk.layers:
            outputs = [block.mixer.out_proj if hasattr(block.mixer, "out_proj") else block.mixer.o_proj]
            mlp = block.mlp
            outputs += [mlp.moe.down, mlp.shared.down] if isinstance(mlp, SparseMLP) else [mlp.down]
            for linear in outputs:
                _scale(linear.weight, residual), _scale(getattr(linear, "bias", None), residual)
        _scale(self.trunk.embed.weight, embedding)
        # logits are linear in the final norm's weight; a tied head is the table, already scaled above
        _scale(self.trunk.norm.weight, 1 / (logits_scaling * (embedding if self.tie_embeddings else 1.0)))
        super().finalize()


def _scale(tensor, factor) -> None:
    if tensor is not None:
        tensor.copy_((tensor.float() * factor).to(tensor.dtype))


def build(cfg: ConfigReader, dtype: str) -> CausalLM:
    hidden, n_layers = cfg.size("hidden_size"), cfg.layers()
    eps = cfg.number("rms_norm_eps", 1e-6, zero_ok=True)
    types = _layer_types(cfg, n_layers)
    cfg.choice("hidden_act", "silu", ("silu",))
    attn_spec, rotary = attention_from(cfg, dtype)
    attn_spec = dataclasses.replace(attn_spec, scale=cfg.number("attention_multiplier", None))
    if cfg.choice("position_embedding_type", "none", ("rope", "none")) != "rope":  # null reads as "none"
        rotary = None
    ssm_spec = mamba2_spec(cfg, dtype, heads="mamba_n_heads", head_dim="mamba_d_head", d_state="mamba_d_state",
                           groups="mamba_n_groups", conv="mamba_d_conv", chunk="mamba_chunk_size",
                           conv_bias="mamba_conv_bias", expand="mamba_expand", eps="rms_norm_eps")
    proj_bias, attn_bias = cfg.opt("mamba_proj_bias", False), cfg.opt("attention_bias", False)
    n_experts = cfg.size("num_local_experts", 0, low=0)
    experts = n_experts and cfg.spec(MoESpec, hidden_size=hidden, num_experts=n_experts,
                                     top_k=cfg.size("num_experts_per_tok"),
                                     intermediate_size=cfg.size("intermediate_size"), activation="silu",
                                     gating="topk_softmax", dtype=dtype)
    shared = cfg.size("shared_intermediate_size")
    info = ModelInfo("granitemoehybrid", cfg.size("vocab_size"), hidden,
                     cfg.size("max_position_embeddings", None, high=None), cfg.eos_ids())
    tie = cfg.opt("tie_word_embeddings", True)
    blocks = []
    for i, layer_type in enumerate(types):
        name = f"model.layers.{i}"
        if layer_type in ATTENTION:
            mixer_name = "self_attn"
            mixer = AttentionLayer(f"{name}.self_attn", hidden, attn_spec, rotary, bias=attn_bias)
        else:
            mixer_name, mixer = "mamba", Mamba2Layer(f"{name}.mamba", hidden, ssm_spec, bias=proj_bias)
        shared_mlp = PackedGatedMLP(f"{name}.shared_mlp", hidden, shared, dtype)
        if experts:
            moe = MoE.stacked(f"{name}.block_sparse_moe", experts, router="router.layer", gate_up="input_linear",
                              down="output_linear")
            mlp_name, mlp = "", SparseMLP(moe, shared_mlp, names=("block_sparse_moe", "shared_mlp"))
        else:
            mlp_name, mlp = "shared_mlp", shared_mlp
        blocks.append(Block(("input_layernorm", mixer_name, "post_attention_layernorm", mlp_name),
                            RMSNorm(f"{name}.input_layernorm", hidden, eps, dtype), mixer,
                            RMSNorm(f"{name}.post_attention_layernorm", hidden, eps, dtype), mlp))
    trunk = Trunk(("embed_tokens", "norm"), Embedding("model.embed_tokens", info.vocab_size, hidden, dtype, tie),
                  blocks, RMSNorm("model.norm", hidden, eps, dtype))
    return GraniteMoeHybrid(info, "model", trunk, tie, dtype, embedding=cfg.number("embedding_multiplier", 1.0),
                            residual=cfg.number("residual_multiplier", 1.0),
                            logits_scaling=cfg.number("logits_scaling", 1.0))
