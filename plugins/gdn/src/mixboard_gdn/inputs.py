"""Validation of what reaches a ``gated_delta_net`` impl; every error names the layer, what was expected
and what arrived (mixboard.ops.checks)."""

from __future__ import annotations

from typing import Any, Mapping

import torch
from mixboard.dtypes import torch_dtype
from mixboard.ops.checks import BackendInputError, expect, expect_pool, expect_state
from mixboard.ops.slot_step import SlotStep

from .kind import GatedDeltaNetSpec, GatedDeltaNetWeights


class InputChecks:
    """Weights are checked once per (record, device); activations, pools and slots on every call."""

    def __init__(self, spec: GatedDeltaNetSpec):
        self.spec = spec
        self.dtype = torch_dtype(spec.dtype)
        self.state_dtype = torch_dtype(spec.state_dtype or spec.dtype)
        self.conv_state_dtype = torch_dtype(spec.conv_state_dtype or spec.dtype)
        self._checked: tuple[Any, torch.device] | None = None

    def __call__(self, layer: str, qkv: Any, z: Any, b: Any, a: Any, weights: Any, state: Mapping[str, Any],
                 step: SlotStep) -> tuple[torch.Tensor, torch.Tensor]:
        """Raise BackendInputError on the first thing that is wrong; return the (conv, ssm) pools."""
        spec = self.spec
        T, Hv = step.num_tokens, spec.num_v_heads
        expect(layer, "qkv", qkv, (T, spec.conv_dim), self.dtype)
        device = qkv.device
        expect(layer, "z", z, (T, spec.value_dim), self.dtype, device)
        expect(layer, "b", b, (T, Hv), self.dtype, device)
        expect(layer, "a", a, (T, Hv), self.dtype, device)
        if self._checked is None or self._checked[0] is not weights or self._checked[1] != device:
            check_weights(layer, spec, weights, device)
            self._checked = (weights, device)
        expect_state(layer, state, ("conv", "ssm"))
        conv, ssm = state["conv"], state["ssm"]
        expect(layer, "state['conv']", conv, (None, spec.conv_dim, spec.d_conv - 1), self.conv_state_dtype,
               device)
        expect(layer, "state['ssm']", ssm, (None, Hv, spec.head_k_dim, spec.head_v_dim), self.state_dtype, device)
        expect_pool(layer, "state['conv']", conv)
        expect_pool(layer, "state['ssm']", ssm)
        step.check_slots(layer, min(conv.shape[0], ssm.shape[0]))
        return conv, ssm


def check_weights(layer: str, spec: GatedDeltaNetSpec, weights: Any, device: torch.device) -> None:
    if not isinstance(weights, GatedDeltaNetWeights):
        raise BackendInputError(f"{layer}: weights must be GatedDeltaNetWeights, got {type(weights).__name__}")
    expect(layer, "weights.conv_weight", weights.conv_weight, (spec.conv_dim, spec.d_conv), device=device)
    if spec.conv_bias:
        if weights.conv_bias is None:
            raise BackendInputError(f"{layer}: the spec has conv_bias=True but weights.conv_bias is None")
        expect(layer, "weights.conv_bias", weights.conv_bias, (spec.conv_dim,), device=device)
    elif weights.conv_bias is not None:
        raise BackendInputError(f"{layer}: the spec has conv_bias=False but weights.conv_bias is set")
    for name in ("dt_bias", "A"):
        expect(layer, f"weights.{name}", getattr(weights, name), (spec.num_v_heads,), device=device)
    if spec.gated_norm:
        if weights.norm_weight is None:
            raise BackendInputError(f"{layer}: the spec has gated_norm=True but weights.norm_weight is None")
        expect(layer, "weights.norm_weight", weights.norm_weight, (spec.head_v_dim,), device=device)
