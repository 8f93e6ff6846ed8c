"""The kind ``gated_delta_net``'s oracle and ``gdn_torch`` against transformers' Qwen3NextGatedDeltaNet (plain
PyTorch, fla absent): the definition written from the recurrence must be the layer Qwen3-Next runs."""

from __future__ import annotations

import pytest
import torch
from transformers.models.qwen3_next.configuration_qwen3_next import Qwen3NextConfig
from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextGatedDeltaNet

from mixboard import CommonBatchMetadata
from mixboard.testing import allocate_state
from mixboard_gdn import GatedDeltaNetSpec, GatedDeltaNetWeights, gdn_state
from mixboard_gdn.oracle import GatedDeltaNetOracle
from mixboard_gdn.torch_impl import GdnTorchImpl


def qwen3_next_layer(num_k_heads: int, num_v_heads: int, seed: int = 0) -> Qwen3NextGatedDeltaNet:
    cfg = Qwen3NextConfig(hidden_size=48, linear_num_key_heads=num_k_heads, linear_num_value_heads=num_v_heads,
                          linear_key_head_dim=16, linear_value_head_dim=8, linear_conv_kernel_dim=4,
                          num_hidden_layers=1, layer_types=["linear_attention"], rms_norm_eps=1e-6)
    torch.manual_seed(seed)
    layer = Qwen3NextGatedDeltaNet(cfg, layer_idx=0).double().eval()
    with torch.no_grad():  # weights of trained scale: a norm weight that is not all ones, a bias on dt
        layer.norm.weight.uniform_(0.5, 1.5)
        layer.dt_bias.uniform_(-1.0, 1.0)
        for proj in (layer.in_proj_qkvz, layer.in_proj_ba, layer.out_proj):
            proj.weight.normal_(0, 0.3)
    return layer


def as_kind(layer: Qwen3NextGatedDeltaNet, hidden: torch.Tensor):
    """What the layer hands its mixer, in the kind's boundary: (spec, inputs, weights)."""
    spec = GatedDeltaNetSpec(dtype="float32", num_k_heads=layer.num_k_heads,
                             num_v_heads=layer.num_v_heads, head_k_dim=layer.head_k_dim,
                             head_v_dim=layer.head_v_dim, d_conv=layer.conv_kernel_size, chunk_size=8,
                             norm_eps=layer.layer_norm_epsilon)
    q, k, v, z, b, a = layer.fix_query_key_value_ordering(layer.in_proj_qkvz(hidden), layer.in_proj_ba(hidden))
    T = hidden.shape[1]
    qkv = torch.cat([x.reshape(1, T, -1) for x in (q, k, v)], dim=-1)[0]
    weights = GatedDeltaNetWeights(conv_weight=layer.conv1d.weight[:, 0], conv_bias=None, dt_bias=layer.dt_bias,
                                   A=-layer.A_log.exp(), norm_weight=layer.norm.weight)
    return spec, (qkv, z.reshape(T, -1), b.reshape(T, -1), a.reshape(T, -1)), weights


@pytest.mark.parametrize("heads", [(2, 4), (2, 2)], ids=["two_value_heads_per_key", "one_per_key"])
@pytest.mark.parametrize("impl_class", [GatedDeltaNetOracle, GdnTorchImpl], ids=["oracle", "gdn_torch"])
def test_matches_qwen3_next_layer(heads, impl_class):
    layer = qwen3_next_layer(*heads)
    T = 37
    hidden = torch.randn(1, T, layer.hidden_size, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = layer(hidden)[0]
        spec, inputs, weights = as_kind(layer, hidden)
        inputs = tuple(x.float() for x in inputs)
        weights = GatedDeltaNetWeights(*(None if w is None else w.float() for w in
                                         (weights.conv_weight, weights.conv_bias, weights.dt_bias, weights.A,
                                          weights.norm_weight)))
        state = allocate_state(gdn_state(spec), 2)
        meta = CommonBatchMetadata.build([T], [0], [1], [[0]], block_size=1 << 16)
        got = layer.out_proj(impl_class(spec).forward(*inputs, weights, state, meta).double())
    scale = expected.abs().max()
    assert scale > 0.1  # the layer's output is not near zero: the comparison means something
    assert (got - expected).abs().max() / scale < 2e-5
