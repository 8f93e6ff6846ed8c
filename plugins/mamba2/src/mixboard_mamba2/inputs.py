"""Validation of what reaches a Mamba-2 impl; every error names the layer,
what was expected and what arrived (mixboard.ops.checks)."""

from __future__ import annotations

from typing import Any, Mapping

import torch
from mixboard.dtypes import torch_dtype
from mixboard.kinds.mamba2 import Mamba2Spec, Mamba2Weights
from mixboard.ops.checks import BackendInputError, expect, expect_slots, expect_state

from .step import Mamba2Step


def check_inputs(layer: str, spec: Mamba2Spec, z: Any, xBC: Any, dt: Any, weights: Any,
                 state: Mapping[str, Any], step: Mamba2Step) -> tuple[torch.Tensor, torch.Tensor]:
    """Raise BackendInputError on the first thing that is wrong; return the (conv, ssm) pools."""
    T, H, P, N, W = step.num_tokens, spec.num_heads, spec.head_dim, spec.d_state, spec.d_conv
    dtype = torch_dtype(spec.dtype)
    expect(layer, "xBC", xBC, (T, spec.conv_dim), dtype)
    device = xBC.device
    expect(layer, "z", z, (T, spec.d_inner), dtype, device)
    expect(layer, "dt", dt, (T, H), dtype, device)

    if not isinstance(weights, Mamba2Weights):
        raise BackendInputError(f"{layer}: weights must be Mamba2Weights, got {type(weights).__name__}")
    expect(layer, "weights.conv_weight", weights.conv_weight, (spec.conv_dim, W), device=device)
    if spec.conv_bias:
        if weights.conv_bias is None:
            raise BackendInputError(f"{layer}: the spec has conv_bias=True but weights.conv_bias is None")
        expect(layer, "weights.conv_bias", weights.conv_bias, (spec.conv_dim,), device=device)
    elif weights.conv_bias is not None:
        raise BackendInputError(f"{layer}: the spec has conv_bias=False but weights.conv_bias is set")
    for name, size in (("dt_bias", H), ("A", H), ("D", H), ("norm_weight", spec.d_inner)):
        expect(layer, f"weights.{name}", getattr(weights, name), (size,), device=device)

    expect_state(layer, state, ("conv", "ssm"))
    state_dtype = torch_dtype(spec.state_dtype or spec.dtype)
    conv, ssm = state["conv"], state["ssm"]
    expect(layer, "state['conv']", conv, (None, spec.conv_dim, W - 1), state_dtype, device)
    expect(layer, "state['ssm']", ssm, (None, H, P, N), state_dtype, device)
    expect_slots(layer, step.slots_cpu, min(conv.shape[0], ssm.shape[0]))
    if step.duplicate_slot is not None:
        raise BackendInputError(f"{layer}: state slot {step.duplicate_slot} is given to two sequences of one step "
                                f"(slots {step.slots_cpu.tolist()}); each sequence needs its own")
    return conv, ssm
