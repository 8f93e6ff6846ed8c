"""Validation of what reaches a Mamba-2 impl; every error names the layer,
what was expected and what arrived (mixboard.ops.checks)."""

from __future__ import annotations

from typing import Any, Mapping

import torch
from mixboard.dtypes import torch_dtype
from mixboard.kinds.mamba2 import Mamba2Spec, Mamba2Weights
from mixboard.ops.checks import BackendInputError, expect, expect_pool, expect_state
from mixboard.ops.slot_step import SlotStep


class InputChecks:
    """An impl's checks of its inputs. A weights record is frozen, so it is
    checked once per (record, device); activations, pools and the step's
    slots on every call."""

    def __init__(self, spec: Mamba2Spec):
        self.spec = spec
        self.dtype = torch_dtype(spec.dtype)
        self.state_dtype = torch_dtype(spec.ssm_dtype)
        self.conv_state_dtype = torch_dtype(spec.conv_dtype)
        self._checked: tuple[Any, torch.device] | None = None

    def __call__(self, layer: str, z: Any, xBC: Any, dt: Any, weights: Any, state: Mapping[str, Any],
                 step: SlotStep) -> tuple[torch.Tensor, torch.Tensor]:
        """Raise BackendInputError on the first thing that is wrong; return the (conv, ssm) pools."""
        spec = self.spec
        T, H, P, N, W = step.num_tokens, spec.num_heads, spec.head_dim, spec.d_state, spec.d_conv
        expect(layer, "xBC", xBC, (T, spec.conv_dim), self.dtype)
        device = xBC.device
        expect(layer, "z", z, (T, spec.d_inner), self.dtype, device)
        expect(layer, "dt", dt, (T, H), self.dtype, device)
        if self._checked is None or self._checked[0] is not weights or self._checked[1] != device:
            check_weights(layer, spec, weights, device)
            self._checked = (weights, device)
        expect_state(layer, state, ("conv", "ssm"))
        conv, ssm = state["conv"], state["ssm"]
        expect(layer, "state['conv']", conv, (None, spec.conv_dim, W - 1), self.conv_state_dtype, device)
        expect(layer, "state['ssm']", ssm, (None, H, P, N), self.state_dtype, device)
        expect_pool(layer, "state['conv']", conv)  # slots may sit in larger pages: records apart
        expect_pool(layer, "state['ssm']", ssm)
        step.check_slots(layer, min(conv.shape[0], ssm.shape[0]))
        return conv, ssm


def check_weights(layer: str, spec: Mamba2Spec, weights: Any, device: torch.device) -> None:
    H, W = spec.num_heads, spec.d_conv
    if not isinstance(weights, Mamba2Weights):
        raise BackendInputError(f"{layer}: weights must be Mamba2Weights, got {type(weights).__name__}")
    expect(layer, "weights.conv_weight", weights.conv_weight, (spec.conv_dim, W), device=device)
    if spec.conv_bias:
        if weights.conv_bias is None:
            raise BackendInputError(f"{layer}: the spec has conv_bias=True but weights.conv_bias is None")
        expect(layer, "weights.conv_bias", weights.conv_bias, (spec.conv_dim,), device=device)
    elif weights.conv_bias is not None:
        raise BackendInputError(f"{layer}: the spec has conv_bias=False but weights.conv_bias is set")
    for name, size in (("dt_bias", H), ("A", H), ("D", H)):
        expect(layer, f"weights.{name}", getattr(weights, name), (size,), device=device)
    if spec.gated_norm:  # without it the caller applies the norm: norm_weight may be None, and is not read
        if weights.norm_weight is None:
            raise BackendInputError(f"{layer}: the spec has gated_norm=True but weights.norm_weight is None")
        expect(layer, "weights.norm_weight", weights.norm_weight, (spec.d_inner,), device=device)

