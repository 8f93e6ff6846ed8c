"""Mamba (v1): norm + mixer blocks, no MLP, residual stream in float32."""

from __future__ import annotations

import math

from torch import nn

from mixboard import Mamba1Spec

from .blocks import RMSNorm
from .config import ConfigReader
from .mixers import Mamba1Layer
from .model import Block, CausalLM, ModelInfo, Trunk


def build(cfg: ConfigReader, dtype: str) -> CausalLM:
    hidden, eps = cfg.req("hidden_size"), cfg.opt("layer_norm_epsilon", 1e-5, float)
    d_inner = cfg.opt("intermediate_size", int(cfg.opt("expand", 2, int) * hidden), int)
    rank = cfg.config.get("time_step_rank", "auto")
    rank = math.ceil(hidden / 16) if rank == "auto" else cfg.req("time_step_rank")
    spec = Mamba1Spec(d_inner=d_inner, d_state=cfg.req("state_size"), d_conv=cfg.opt("conv_kernel", 4, int),
                      dt_rank=rank, conv_bias=cfg.opt("use_conv_bias", True), dtype=dtype)
    residual_fp32 = cfg.opt("residual_in_fp32", True)
    blocks = [Block("norm", RMSNorm(hidden, eps), "mixer",
                    Mamba1Layer(f"backbone.layers.{i}.mixer", hidden, spec, bias=cfg.opt("use_bias", False)),
                    residual_fp32=residual_fp32)
              for i in range(cfg.req("num_hidden_layers"))]
    info = ModelInfo("mamba", cfg.req("vocab_size"), hidden, None, cfg.eos_ids())
    trunk = Trunk("embeddings", nn.Embedding(info.vocab_size, hidden), blocks, "norm_f", RMSNorm(hidden, eps))
    return CausalLM(info, "backbone", trunk, cfg.opt("tie_word_embeddings", True))
