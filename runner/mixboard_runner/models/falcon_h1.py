"""Falcon-H1: in every block, attention and Mamba-2 side by side on the same
normed input, their outputs summed, then a SwiGLU MLP.

    x = x + ssm_out * mamba(norm(x)) + attn_out * attention(attn_in * norm(x))
    x = x + mlp(pre_ff_norm(x))

Its µP multipliers all scale a linear map's input or output, so they are
folded into the weights once they are loaded (``MuP.fold``); the kinds
never see them."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .blocks import GatedMLP, ParallelMixers
from .config import ConfigReader, ModelError, check_number, show
from .llama import attention_from
from .mamba2 import mamba2_spec
from .mixers import AttentionLayer, Mamba2Layer
from .model import Block, CausalLM, ModelInfo, Trunk
from .ops import Embedding, RMSNorm


def _numbers(cfg: ConfigReader, key: str, count: int) -> tuple[float, ...]:
    value = cfg.config.get(key)
    if value is None:
        return (1.0,) * count
    if not isinstance(value, list) or len(value) != count:
        raise ModelError(f"config.json: {key!r} must be a list of {count} numbers, not {show(value)}")
    return tuple(check_number(f"'{key}[{i}]'", v) for i, v in enumerate(value))


@dataclass(frozen=True)
class MuP:
    """Falcon-H1's multipliers, as config.json names them."""

    embedding: float
    lm_head: float
    attention_in: float
    key: float
    attention_out: float
    ssm_in: float
    ssm_out: float
    ssm_zxbcdt: tuple[float, ...]  # z, x, B, C, dt: the sections of the Mamba in_proj's output
    mlp_gate: float
    mlp_down: float

    @classmethod
    def read(cls, cfg: ConfigReader) -> "MuP":
        one = lambda key: cfg.number(key, 1.0)  # noqa: E731
        gate, down = _numbers(cfg, "mlp_multipliers", 2)
        return cls(one("embedding_multiplier"), one("lm_head_multiplier"), one("attention_in_multiplier"),
                   one("key_multiplier"), one("attention_out_multiplier"), one("ssm_in_multiplier"),
                   one("ssm_out_multiplier"), _numbers(cfg, "ssm_multipliers", 5), gate, down)

    @torch.no_grad()
    def fold(self, model: "FalconH1") -> None:
        """Scale the loaded weights so that the plain blocks compute what the multipliers would."""
        for block in model.trunk.layers:
            attn, ssm, mlp = block.mixer.attention, block.mixer.ssm, block.mlp
            for part in (attn.q_proj, attn.k_proj, attn.v_proj):
                _scale(part.weight, self.attention_in)  # scales the input: the bias stays
            _scale(attn.k_proj.weight, self.key), _scale(attn.k_proj.bias, self.key)
            _scale(attn.o_proj.weight, self.attention_out), _scale(attn.o_proj.bias, self.attention_out)
            s = ssm.spec
            sections = (s.d_inner, s.d_inner, s.n_groups * s.d_state, s.n_groups * s.d_state, s.num_heads)
            rows = torch.cat([torch.full((n,), m) for n, m in zip(sections, self.ssm_zxbcdt)])
            _scale(ssm.in_proj.weight, rows[:, None] * self.ssm_in), _scale(ssm.in_proj.bias, rows)
            _scale(ssm.out_proj.weight, self.ssm_out), _scale(ssm.out_proj.bias, self.ssm_out)
            _scale(mlp.gate.weight, self.mlp_gate), _scale(mlp.gate.bias, self.mlp_gate)
            _scale(mlp.down.weight, self.mlp_down), _scale(mlp.down.bias, self.mlp_down)
        _scale(model.trunk.embed.weight, self.embedding)
        # logits are linear in the final norm's weight; a tied head is the table, already scaled above
        tied = self.embedding if model.tie_embeddings else 1.0
        _scale(model.trunk.norm.weight, self.lm_head / tied)


def _scale(tensor: torch.Tensor | None, factor) -> None:
    if tensor is not None:
        tensor.copy_((tensor.float() * factor).to(tensor.dtype))


class FalconH1(CausalLM):
    def __init__(self, *args, mup: MuP, **kwargs):
        super().__init__(*args, **kwargs)
        self.mup = mup

    def finalize(self) -> None:
        self.mup.fold(self)
        super().finalize()


def _ssm_spec(cfg: ConfigReader, dtype: str):
    hidden = cfg.size("hidden_size")
    d_inner = cfg.size("mamba_d_ssm", None)
    if d_inner is None:
        d_inner = cfg.derived("mamba_expand x hidden_size", cfg.number("mamba_expand", 2.0) * hidden)
    # Without mamba_rms_norm the mixer only gates (the layer does, gated_norm=False); with it, the
    # spec's norm is the gate first, then the grouped norm: the other order is not a kind's yet.
    normed = cfg.opt("mamba_rms_norm", False)
    if normed:
        cfg.choice("mamba_norm_before_gate", True, (False,),
                   " with mamba_rms_norm (the norm after the gate, as in Mamba-2)")
    return mamba2_spec(cfg, dtype, heads="mamba_n_heads", head_dim="mamba_d_head", d_state="mamba_d_state",
                       groups="mamba_n_groups", conv="mamba_d_conv", chunk="mamba_chunk_size",
                       conv_bias="mamba_conv_bias", expand="mamba_expand", eps="rms_norm_eps", d_inner=d_inner,
                       gated_norm=normed)


def build(cfg: ConfigReader, dtype: str) -> CausalLM:
    hidden, n_layers, mlp = cfg.size("hidden_size"), cfg.layers(), cfg.size("intermediate_size")
    eps = cfg.number("rms_norm_eps", 1e-5, zero_ok=True)
    cfg.choice("hidden_act", "silu", ("silu",))
    attn_spec, rotary = attention_from(cfg, dtype)
    ssm_spec = _ssm_spec(cfg, dtype)
    attn_bias, mlp_bias = cfg.opt("attention_bias", False), cfg.opt("mlp_bias", False)
    proj_bias, out_bias = cfg.opt("mamba_proj_bias", False), cfg.opt("projectors_bias", False)
    mup = MuP.read(cfg)
    info = ModelInfo("falcon_h1", cfg.size("vocab_size"), hidden, cfg.size("max_position_embeddings", None, high=None),
                     cfg.eos_ids())
    tie = cfg.opt("tie_word_embeddings", False)
    blocks = []
    for i in range(n_layers):
        name = f"model.layers.{i}"
        mixers = ParallelMixers(
            {"attention": AttentionLayer(f"{name}.self_attn", hidden, attn_spec, rotary, bias=attn_bias),
             "ssm": Mamba2Layer(f"{name}.mamba", hidden, ssm_spec, bias=proj_bias, out_bias=out_bias)},
            {"attention": "self_attn", "ssm": "mamba"})
        blocks.append(Block(("input_layernorm", "", "pre_ff_layernorm", "feed_forward"),
                            RMSNorm(f"{name}.input_layernorm", hidden, eps, dtype), mixers,
                            RMSNorm(f"{name}.pre_ff_layernorm", hidden, eps, dtype),
                            GatedMLP(f"{name}.feed_forward", hidden, mlp, dtype, bias=mlp_bias)))
    trunk = Trunk(("embed_tokens", "final_layernorm"), Embedding("model.embed_tokens", info.vocab_size, hidden, dtype, tie),
                  blocks, RMSNorm("model.final_layernorm", hidden, eps, dtype))
    return FalconH1(info, "model", trunk, tie, dtype, mup=mup)
