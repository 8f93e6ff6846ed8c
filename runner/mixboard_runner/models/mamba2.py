"""Mamba-2: norm + SSD mixer blocks, no MLP, residual stream in float32."""

from __future__ import annotations

from torch import nn

from mixboard import Mamba2Spec

from .blocks import RMSNorm
from .config import ConfigReader, ModelError
from .mixers import Mamba2Layer
from .model import Block, CausalLM, ModelInfo, Trunk


def mamba2_spec(cfg: ConfigReader, dtype: str, *, heads: str, head_dim: str, d_state: str, groups: str, conv: str,
                chunk: str, conv_bias: str, expand: str, eps: str) -> Mamba2Spec:
    hidden = cfg.req("hidden_size")
    d_inner = int(cfg.opt(expand, 2, float) * hidden)
    num_heads = cfg.req(heads)
    dim = cfg.config.get(head_dim, "auto")
    dim = d_inner // num_heads if dim == "auto" else cfg.req(head_dim)
    if num_heads * dim != d_inner:
        raise ModelError(f"config.json: {heads} ({num_heads}) x {head_dim} ({dim}) must equal "
                         f"{expand} x hidden_size ({d_inner})")
    low, high = cfg.time_step_limit()
    return Mamba2Spec(num_heads=num_heads, head_dim=dim, d_state=cfg.req(d_state), n_groups=cfg.opt(groups, 1, int),
                      d_conv=cfg.opt(conv, 4, int), chunk_size=cfg.opt(chunk, 256, int),
                      conv_bias=cfg.opt(conv_bias, True), norm_eps=cfg.opt(eps, 1e-5, float),
                      dt_min=low, dt_max=high, dtype=dtype)


def build(cfg: ConfigReader, dtype: str) -> CausalLM:
    hidden, eps = cfg.req("hidden_size"), cfg.opt("layer_norm_epsilon", 1e-5, float)
    spec = mamba2_spec(cfg, dtype, heads="num_heads", head_dim="head_dim", d_state="state_size", groups="n_groups",
                       conv="conv_kernel", chunk="chunk_size", conv_bias="use_conv_bias", expand="expand",
                       eps="layer_norm_epsilon")
    residual_fp32 = cfg.opt("residual_in_fp32", True)
    blocks = [Block("norm", RMSNorm(hidden, eps), "mixer",
                    Mamba2Layer(f"backbone.layers.{i}.mixer", hidden, spec, bias=cfg.opt("use_bias", False)),
                    residual_fp32=residual_fp32)
              for i in range(cfg.req("num_hidden_layers"))]
    info = ModelInfo("mamba2", cfg.req("vocab_size"), hidden, None, cfg.eos_ids())
    trunk = Trunk("embeddings", nn.Embedding(info.vocab_size, hidden), blocks, "norm_f", RMSNorm(hidden, eps))
    return CausalLM(info, "backbone", trunk, cfg.opt("tie_word_embeddings", False))
