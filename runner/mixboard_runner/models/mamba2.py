"""Mamba-2: norm + SSD mixer blocks, no MLP, residual stream in float32."""

from __future__ import annotations

from mixboard import Mamba2Spec

from .config import ConfigReader, ModelError
from .mixers import Mamba2Layer
from .model import Block, CausalLM, ModelInfo, Trunk
from .ops import Embedding, RMSNorm


def mamba2_spec(cfg: ConfigReader, dtype: str, *, heads: str, head_dim: str, d_state: str, groups: str, conv: str,
                chunk: str, conv_bias: str, expand: str, eps: str, d_inner: int | None = None,
                **fields) -> Mamba2Spec:
    """The SSD mixer's spec from the config's keys of these names, every value checked. ``d_inner``: where
    the model sets the inner width itself (Falcon-H1's mamba_d_ssm), else ``expand`` x hidden_size.
    ``fields``: further spec fields as they are (gated_norm)."""
    hidden, inner_what = cfg.size("hidden_size"), "the inner width"
    if d_inner is None:
        inner_what = f"{expand} x hidden_size"
        d_inner = cfg.derived(inner_what, cfg.number(expand, 2.0) * hidden)
    num_heads = cfg.size(heads)
    dim = cfg.config.get(head_dim, "auto")
    dim = d_inner // num_heads if dim == "auto" else cfg.size(head_dim)
    if num_heads * dim != d_inner:
        raise ModelError(f"config.json: {heads} ({num_heads}) x {head_dim} ({dim}) must equal "
                         f"{inner_what} ({d_inner})")
    n_groups, state = cfg.size(groups, 1), cfg.size(d_state)
    cfg.divisible(heads, num_heads, groups, n_groups)
    cfg.derived(f"2 x {groups} x {d_state}", 2 * n_groups * state)
    low, high = cfg.time_step_limit()
    return cfg.spec(Mamba2Spec, num_heads=num_heads, head_dim=dim, d_state=state, n_groups=n_groups,
                    d_conv=cfg.size(conv, 4, low=2), chunk_size=cfg.size(chunk, 256),
                    conv_bias=cfg.opt(conv_bias, True), norm_eps=cfg.number(eps, 1e-5, zero_ok=True),
                    dt_min=low, dt_max=high, dtype=dtype, **fields)


def build(cfg: ConfigReader, dtype: str) -> CausalLM:
    hidden, n_layers = cfg.size("hidden_size"), cfg.layers()
    eps = cfg.number("layer_norm_epsilon", 1e-5, zero_ok=True)
    spec = mamba2_spec(cfg, dtype, heads="num_heads", head_dim="head_dim", d_state="state_size", groups="n_groups",
                       conv="conv_kernel", chunk="chunk_size", conv_bias="use_conv_bias", expand="expand",
                       eps="layer_norm_epsilon")
    residual_fp32, bias = cfg.opt("residual_in_fp32", True), cfg.opt("use_bias", False)
    info = ModelInfo("mamba2", cfg.size("vocab_size"), hidden, None, cfg.eos_ids())
    tie = cfg.opt("tie_word_embeddings", False)
    blocks = [Block(("norm", "mixer"),
                    RMSNorm(f"backbone.layers.{i}.norm", hidden, eps, dtype, residual_fp32),
                    Mamba2Layer(f"backbone.layers.{i}.mixer", hidden, spec, bias=bias))
              for i in range(n_layers)]
    trunk = Trunk(("embeddings", "norm_f"), Embedding("backbone.embeddings", info.vocab_size, hidden, dtype, tie), blocks,
                  RMSNorm("backbone.norm_f", hidden, eps, dtype, residual_fp32))
    return CausalLM(info, "backbone", trunk, tie, dtype)
