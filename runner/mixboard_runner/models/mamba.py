"""Mamba (v1): norm + mixer blocks, no MLP, residual stream in float32."""

from __future__ import annotations

import math

from mixboard import Mamba1Spec

from .config import ConfigReader
from .mixers import Mamba1Layer
from .model import Block, CausalLM, ModelInfo, Trunk
from .ops import Embedding, RMSNorm


def build(cfg: ConfigReader, dtype: str) -> CausalLM:
    hidden, n_layers = cfg.size("hidden_size"), cfg.layers()
    eps = cfg.number("layer_norm_epsilon", 1e-5, zero_ok=True)
    expand = cfg.size("expand", 2)
    d_inner = cfg.size("intermediate_size", None) or cfg.derived("expand x hidden_size", expand * hidden)
    rank = math.ceil(hidden / 16) if cfg.config.get("time_step_rank", "auto") == "auto" else cfg.size("time_step_rank")
    spec = cfg.spec(Mamba1Spec, d_inner=d_inner, d_state=cfg.size("state_size"),
                    d_conv=cfg.size("conv_kernel", 4, low=2), dt_rank=rank, conv_bias=cfg.opt("use_conv_bias", True),
                    dtype=dtype)
    residual_fp32, bias = cfg.opt("residual_in_fp32", True), cfg.opt("use_bias", False)
    info = ModelInfo("mamba", cfg.size("vocab_size"), hidden, None, cfg.eos_ids())
    tie = cfg.opt("tie_word_embeddings", True)
    blocks = [Block(("norm", "mixer"),
                    RMSNorm(f"backbone.layers.{i}.norm", hidden, eps, dtype, residual_fp32),
                    Mamba1Layer(f"backbone.layers.{i}.mixer", hidden, spec, bias=bias))
              for i in range(n_layers)]
    trunk = Trunk(("embeddings", "norm_f"), Embedding("backbone.embeddings", info.vocab_size, hidden, dtype, tie), blocks,
                  RMSNorm("backbone.norm_f", hidden, eps, dtype, residual_fp32))
    return CausalLM(info, "backbone", trunk, tie, dtype)
