"""Gated DeltaNet, Qwen3-Next's linear attention, as a mixer of kind ``gated_delta_net``.

The kind (spec, weights, impl contract) belongs to the plugin ``mixboard-gdn``;
the runner imports only core ``mixboard``, so the spec class is looked up by
the kind's name in the registry where the model is built (``gdn_spec_class``).

The checkpoint's projections interleave their outputs per key head
(``in_proj_qkvz``: q, k, v, z of key head 0, then of head 1 ...;
``in_proj_ba``: b, a alike). ``finalize`` permutes their rows once so the
product comes out as the kind wants it, [q | k | v | z | b | a], and each
step only slices."""

from __future__ import annotations

import importlib

import torch
from torch import nn

from mixboard.errors import UsageError
from mixboard.registry import get_registry

from .config import ModelError
from .mixers import GatedNormWeight, MixerLayer
from .ops import FusedLinear, Linear, Params

KIND = "gated_delta_net"


def gdn_spec_class(model_type: str):
    """The spec class of kind ``gated_delta_net``, registered by mixboard-gdn (``mixboard_kinds`` hook)."""
    try:
        return get_registry().kind(KIND).spec
    except UsageError:
        raise ModelError(f"a {model_type} model's linear_attention layers are Gated DeltaNet, kind {KIND!r}, "
                         f"which no installed plugin defines: pip install mixboard-gdn (or ./plugins/gdn)") from None


def gdn_weights_class():
    """The kind's weights record, ``GatedDeltaNetWeights``, defined beside its spec (a Kind names no record)."""
    return getattr(importlib.import_module(get_registry().kind(KIND).spec.__module__), "GatedDeltaNetWeights")


class GatedDeltaNetLayer(MixerLayer):
    """in_proj_qkvz and in_proj_ba (one product), the kind's conv, scan and gated norm, then out_proj."""

    kind = KIND

    def __init__(self, layer_name: str, hidden: int, spec):
        super().__init__(layer_name, spec)
        key_dim, value_dim, hv = spec.key_dim, spec.value_dim, spec.num_v_heads
        self.in_proj_qkvz = Params(hidden, 2 * key_dim + 2 * value_dim, bias=False)
        self.in_proj_ba = Params(hidden, 2 * hv, bias=False)
        self.in_proj = FusedLinear(f"{layer_name}.in_proj", (self.in_proj_qkvz, self.in_proj_ba), spec.dtype)
        self.conv1d = nn.Conv1d(spec.conv_dim, spec.conv_dim, spec.d_conv, groups=spec.conv_dim, bias=spec.conv_bias)
        self.dt_bias = nn.Parameter(torch.ones(hv))
        self.A_log = nn.Parameter(torch.zeros(hv))
        self.norm = GatedNormWeight(spec.head_v_dim)
        self.out_proj = Linear(f"{layer_name}.out_proj", value_dim, hidden, spec.dtype)
        self.sizes = [spec.conv_dim, value_dim, hv, hv]  # qkv, z, b, a
        self.weights = None

    @torch.no_grad()
    def finalize(self):
        s = self.spec
        per_head = s.num_v_heads // s.num_k_heads
        v_rows = per_head * s.head_v_dim
        self.in_proj_qkvz.weight.copy_(_grouped(self.in_proj_qkvz.weight, s.num_k_heads,
                                                (s.head_k_dim, s.head_k_dim, v_rows, v_rows)))
        self.in_proj_ba.weight.copy_(_grouped(self.in_proj_ba.weight, s.num_k_heads, (per_head, per_head)))
        self.weights = gdn_weights_class()(
            conv_weight=self.conv1d.weight[:, 0].detach(), conv_bias=_detach(self.conv1d.bias),
            dt_bias=self.dt_bias.detach(), A=-torch.exp(self.A_log.detach().float()),  # float32, as transformers
            norm_weight=self.norm.weight.detach())

    def forward(self, x, positions, step):
        qkv, z, b, a = self.in_proj(x).split(self.sizes, dim=-1)
        impl, state, meta = step.lookup(self.layer_name)
        return self.out_proj(impl.forward(qkv, z, b, a, self.weights, state, meta))


def _grouped(weight: torch.Tensor, groups: int, parts: tuple[int, ...]) -> torch.Tensor:
    """Rows laid out per group as [p0, p1, ...] of sizes ``parts``, regrouped per part: [p0 of every group,
    then p1 of every group, ...] (each part's rows keep their group order)."""
    per_group = weight.view(groups, sum(parts), weight.shape[-1]).split(parts, dim=1)
    return torch.cat([part.reshape(-1, weight.shape[-1]) for part in per_group])


def _detach(t):
    return None if t is None else t.detach()
