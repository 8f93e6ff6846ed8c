"""Nemotron-H: a pattern of single-sublayer blocks, x = x + layer(norm(x)),
each layer one of

    M  Mamba-2 (its gated norm grouped by n_groups, as the mamba2 kind's is)
    *  attention without positional embedding
    -  MLP, down(relu(up(x)) ** 2)
    E  routed experts (relu2, sigmoid routing) beside a shared expert

as ``layers_block_type`` (or the older ``hybrid_override_pattern``) lists them."""

from __future__ import annotations

from mixboard import AttentionSpec, MoESpec

from .blocks import SquaredReLUMLP
from .config import MAX_LAYERS, ConfigReader, ModelError, check_size, show
from .experts import MoE, SparseMLP
from .mamba2 import mamba2_spec
from .mixers import AttentionLayer, Mamba2Layer
from .model import Block, CausalLM, ModelInfo, Trunk
from .ops import Embedding, RMSNorm

PATTERN = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}


def _layer_types(cfg: ConfigReader) -> tuple[str, list[str]]:
    """(the key they came from, one type per layer)."""
    types = cfg.config.get("layers_block_type")
    if types is None:
        pattern = cfg.config.get("hybrid_override_pattern")
        if not isinstance(pattern, str) or not pattern or set(pattern) - set(PATTERN):
            raise ModelError(f"config.json: 'hybrid_override_pattern' must be a string of {', '.join(PATTERN)} "
                             f"(or give 'layers_block_type'), not {show(pattern)}")
        return "hybrid_override_pattern", [PATTERN[c] for c in pattern]
    if not isinstance(types, list) or not types or not all(t in PATTERN.values() for t in types):
        wanted = " or ".join(map(repr, PATTERN.values()))
        raise ModelError(f"config.json: 'layers_block_type' must be a list of {wanted}, not {show(types)}")
    return "layers_block_type", types


def _key(cfg: ConfigReader, name: str, older: str) -> str:
    """The key a config spells this setting with (checkpoints before transformers 5 use older names too)."""
    return older if name not in cfg.config and older in cfg.config else name


def _experts(cfg: ConfigReader, dtype: str) -> MoESpec:
    n_group = cfg.size("n_group", 1)
    if cfg.size("topk_group", 1) != n_group:  # choosing among all groups is choosing among all experts
        cfg.choice("n_group", 1, (1,), " (routing within groups of experts is not the moe kind's)")
    if cfg.config.get("moe_latent_size") is not None:
        cfg.choice("moe_latent_size", 0, (None,), " (experts on a latent projection are not served yet)")
    return cfg.spec(MoESpec, hidden_size=cfg.size("hidden_size"), num_experts=cfg.size("n_routed_experts"),
                    top_k=cfg.size("num_experts_per_tok"), intermediate_size=cfg.size("moe_intermediate_size"),
                    activation="relu2", gating="sigmoid_topk", normalize_topk=cfg.opt("norm_topk_prob", True),
                    routed_scaling=cfg.number("routed_scaling_factor", 1.0), selection_bias=True, dtype=dtype)


def build(cfg: ConfigReader, dtype: str) -> CausalLM:
    hidden, eps = cfg.size("hidden_size"), cfg.number("layer_norm_epsilon", 1e-5, zero_ok=True)
    source, types = _layer_types(cfg)
    check_size(f"the number of layers in {source!r}", len(types), high=MAX_LAYERS)
    cfg.choice("mlp_hidden_act", "relu2", ("relu2",))
    cfg.choice("mamba_hidden_act", "silu", ("silu",))
    heads = cfg.size("num_attention_heads")
    kv_heads = cfg.size("num_key_value_heads", heads)
    cfg.divisible("num_attention_heads", heads, "num_key_value_heads", kv_heads)
    head_size = cfg.size("head_dim", None) or cfg.derived("hidden_size / num_attention_heads", hidden // heads)
    # full causal attention: transformers' Nemotron-H applies neither rotary embedding nor a sliding window
    attn_spec = cfg.spec(AttentionSpec, num_heads=heads, num_kv_heads=kv_heads, head_size=head_size, dtype=dtype)
    ssm_heads, ssm_head_dim = cfg.size("mamba_num_heads"), cfg.size("mamba_head_dim")
    ssm_spec = mamba2_spec(cfg, dtype, heads="mamba_num_heads", head_dim="mamba_head_dim", d_state="ssm_state_size",
                           groups=_key(cfg, "n_groups", "mamba_n_groups"), conv=_key(cfg, "conv_kernel", "mamba_d_conv"),
                           chunk=_key(cfg, "chunk_size", "mamba_chunk_size"),
                           conv_bias=_key(cfg, "use_conv_bias", "mamba_conv_bias"), expand="expand",
                           eps="layer_norm_epsilon",
                           d_inner=cfg.derived("mamba_num_heads x mamba_head_dim", ssm_heads * ssm_head_dim))
    bias, mlp_bias, mlp = cfg.opt("use_bias", False), cfg.opt("mlp_bias", False), cfg.size("intermediate_size")
    info = ModelInfo("nemotron_h", cfg.size("vocab_size"), hidden,
                     cfg.size("max_position_embeddings", None, high=None), cfg.eos_ids())
    tie = cfg.opt("tie_word_embeddings", False)
    experts = _experts(cfg, dtype) if "moe" in types else None
    layers = {
        "linear_attention": lambda name: Mamba2Layer(name, hidden, ssm_spec, bias=bias),
        "full_attention": lambda name: AttentionLayer(name, hidden, attn_spec, None),
        "mlp": lambda name: SquaredReLUMLP(name, hidden, mlp, dtype, bias=mlp_bias),
        "moe": lambda name: SparseMLP(
            MoE.per_expert(f"{name}.experts", experts, router="gate", selection_bias="e_score_correction_bias", gate=None),
            SquaredReLUMLP(f"{name}.shared_experts", hidden, cfg.size("moe_shared_expert_intermediate_size"), dtype,
                           bias=mlp_bias)),
    }
    blocks = [Block(("norm", "mixer"), RMSNorm(f"backbone.layers.{i}.norm", hidden, eps, dtype),
                    layers[layer_type](f"backbone.layers.{i}.mixer"))
              for i, layer_type in enumerate(types)]
    trunk = Trunk(("embeddings", "norm_f"), Embedding("backbone.embeddings", info.vocab_size, hidden, dtype, tie),
                  blocks, RMSNorm("backbone.norm_f", hidden, eps, dtype))
    return CausalLM(info, "backbone", trunk, tie, dtype)
