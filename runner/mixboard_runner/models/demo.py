"""The built-in default model: a small hybrid with all four kinds and a
byte-level tokenizer, with deterministic seeded weights (nothing to download).

Eight blocks — attention, mamba2, short_conv, mamba1, twice — each with a
SwiGLU MLP. The weights are random (seed 0): the text it writes is noise;
what it shows is the registry, the plan and the engine at work.
"""

from __future__ import annotations

import math

import torch
from mixboard import AttentionSpec, Mamba1Spec, Mamba2Spec, ShortConvSpec

from .blocks import GatedMLP
from .mixers import AttentionLayer, Mamba1Layer, Mamba2Layer, ShortConvLayer
from .model import Block, CausalLM, ModelInfo, Trunk
from .ops import Embedding, RMSNorm, Rotary

HIDDEN, VOCAB, EOS = 256, 258, 256  # 256 bytes, then <eos> and <pad>
PATTERN = ("attention", "mamba2", "short_conv", "mamba1") * 2


def build(dtype: str = "float32", seed: int = 0) -> CausalLM:
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = _build(dtype)
        for module in model.modules():  # SSM parameters with their usual initial values, not zeros
            if isinstance(module, Mamba1Layer):
                module.A_log.data.copy_(torch.log(torch.arange(1, module.spec.d_state + 1.0)).expand_as(module.A_log))
            if isinstance(module, Mamba2Layer):
                module.dt_bias.data.copy_(torch.log(torch.expm1(torch.full_like(module.dt_bias, 0.01))))
    finally:
        torch.random.set_rng_state(generator_state)
    return model


def _build(dtype: str) -> CausalLM:
    attn = AttentionSpec(num_heads=4, num_kv_heads=2, head_size=64, dtype=dtype)
    rotary = Rotary("model.rotary_emb", 64, 10000.0, dtype)
    makers = {
        "attention": lambda n: ("self_attn", AttentionLayer(f"{n}.self_attn", HIDDEN, attn, rotary)),
        "mamba2": lambda n: ("mixer", Mamba2Layer(f"{n}.mixer", HIDDEN, Mamba2Spec(
            num_heads=8, head_dim=64, d_state=32, n_groups=1, chunk_size=64, dtype=dtype))),
        "short_conv": lambda n: ("conv", ShortConvLayer(f"{n}.conv", HIDDEN, ShortConvSpec(hidden_size=HIDDEN, dtype=dtype))),
        "mamba1": lambda n: ("mixer", Mamba1Layer(f"{n}.mixer", HIDDEN, Mamba1Spec(
            d_inner=2 * HIDDEN, d_state=16, dt_rank=math.ceil(HIDDEN / 16), dtype=dtype))),
    }
    blocks = []
    for i, kind in enumerate(PATTERN):
        name = f"model.layers.{i}"
        mixer_name, mixer = makers[kind](name)
        blocks.append(Block(("input_layernorm", mixer_name, "post_mixer_layernorm", "mlp"),
                            RMSNorm(f"{name}.input_layernorm", HIDDEN, 1e-5, dtype), mixer,
                            RMSNorm(f"{name}.post_mixer_layernorm", HIDDEN, 1e-5, dtype),
                            GatedMLP(f"{name}.mlp", HIDDEN, 2 * HIDDEN, dtype)))
    info = ModelInfo("demo", VOCAB, HIDDEN, 4096, (EOS,))
    trunk = Trunk(("embed_tokens", "norm"), Embedding("model.embed_tokens", VOCAB, HIDDEN, dtype, tied=True), blocks,
                  RMSNorm("model.norm", HIDDEN, 1e-5, dtype))
    return CausalLM(info, "model", trunk, tie_embeddings=True, dtype=dtype)
