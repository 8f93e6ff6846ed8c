"""What mixboard's conformance kit must know to test backends of ``gated_delta_net``: the oracle, the
tensors a step feeds ``forward``, the weights a layer holds and the shapes worth sweeping.
``GatedDeltaNetConformance`` is the base test class a backend's tests subclass."""

from __future__ import annotations

import torch
from mixboard.testing.conformance import KindAdapter, conformance_suite

from .kind import GatedDeltaNetWeights
from .oracle import GatedDeltaNetOracle


def draw_weights(spec, gen: torch.Generator) -> GatedDeltaNetWeights:
    """float64 (the kit casts them to the layer's dtype). Decays exp(g) land between ~0.4 and ~1: some heads
    remember for hundreds of tokens, some for a few, as trained models' do."""
    h, f64 = spec.num_v_heads, torch.float64

    def uniform(lo, hi, *shape):
        return lo + (hi - lo) * torch.rand(*shape, generator=gen, dtype=f64)

    dt = uniform(0.05, 0.5, h)
    return GatedDeltaNetWeights(
        conv_weight=torch.randn(spec.conv_dim, spec.d_conv, generator=gen, dtype=f64) * 0.5,
        conv_bias=torch.randn(spec.conv_dim, generator=gen, dtype=f64) * 0.2 if spec.conv_bias else None,
        dt_bias=dt + torch.log(-torch.expm1(-dt)),  # softplus(dt_bias) = dt
        A=-uniform(0.1, 2.0, h),
        norm_weight=uniform(0.5, 1.5, spec.head_v_dim) if spec.gated_norm else None,
    )


GATED_DELTA_NET = KindAdapter(
    kind="gated_delta_net",
    base=dict(num_k_heads=2, num_v_heads=4, head_k_dim=8, head_v_dim=8, d_conv=4, chunk_size=4),
    inputs=lambda s: {"qkv": ((s.conv_dim,), 1.0), "z": ((s.value_dim,), 1.0), "b": ((s.num_v_heads,), 1.0),
                      "a": ((s.num_v_heads,), 0.5)},
    oracle=GatedDeltaNetOracle,
    weights=draw_weights,
    shapes=(
        ("one_value_head_per_key", dict(num_v_heads=2)),
        ("four_value_heads_per_key", dict(num_k_heads=1)),
        ("dk16_dv4", dict(head_k_dim=16, head_v_dim=4)),
        ("chunk5", dict(chunk_size=5)),
        ("d_conv2", dict(d_conv=2)),
        ("conv_bias", dict(conv_bias=True)),
        ("state_float32", dict(state_dtype="float32")),  # with bfloat16, vLLM's layout: conv state bfloat16
        ("conv_state_float32", dict(conv_state_dtype="float32")),
    ),
    real=dict(num_k_heads=1, num_v_heads=2, head_k_dim=128, head_v_dim=128, d_conv=4, chunk_size=64),  # Qwen3-Next's
    long_shapes=(("state_float32", dict(state_dtype="float32")),),
    variants=(("no_gated_norm", dict(gated_norm=False)), ("no_qk_l2norm", dict(qk_l2norm=False))),
)
GatedDeltaNetConformance = conformance_suite(GATED_DELTA_NET)
