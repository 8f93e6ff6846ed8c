"""The checks of what reaches the short_conv and mamba1 impls: shapes, dtypes,
devices and the step's slots, read on the host (no device synchronisation).
Errors name the layer, what was expected and what arrived."""

from __future__ import annotations

from typing import Any, Mapping

import torch

from mixboard.dtypes import torch_dtype
from mixboard.kinds.mamba1 import Mamba1Weights
from mixboard.kinds.short_conv import ShortConvWeights
from mixboard.ops.checks import BackendInputError, expect, expect_pool, expect_state
from mixboard.ops.slot_step import SlotStep


def check_conv_weights(layer: str, weights: Any, channels: int, width: int, has_bias: bool,
                       device: torch.device) -> None:
    expect(layer, "conv_weight", weights.conv_weight, (channels, width), device=device)
    if has_bias and weights.conv_bias is None:
        raise BackendInputError(f"{layer}: the spec has conv_bias=True but weights.conv_bias is None")
    if not has_bias and weights.conv_bias is not None:
        raise BackendInputError(f"{layer}: the spec has conv_bias=False but weights.conv_bias is set")
    if has_bias:
        expect(layer, "conv_bias", weights.conv_bias, (channels,), device=device)


def check_pools(layer: str, state: Mapping[str, Any], shapes: dict[str, tuple[int, ...]], dtype: torch.dtype,
                device: torch.device, meta: SlotStep) -> list[torch.Tensor]:
    """The named slot pools, each [slots, *shape] in ``dtype`` with contiguous records; the step's slots in range."""
    expect_state(layer, state, tuple(shapes))
    pools = []
    for name, shape in shapes.items():
        pool = state[name]
        expect(layer, f"state['{name}']", pool, (None, *shape), dtype, device)
        expect_pool(layer, f"state['{name}']", pool)  # records may sit in larger pages: apart
        pools.append(pool)
    meta.check_slots(layer, min(p.shape[0] for p in pools))
    return pools


def check_short_conv(layer: str, spec, B, C, x, weights, state, meta: SlotStep) -> torch.Tensor:
    """Raise BackendInputError on any mismatch; return the conv pool."""
    dtype, hidden = torch_dtype(spec.dtype), spec.hidden_size
    expect(layer, "x", x, (meta.num_tokens, hidden), dtype)
    expect(layer, "B", B, (meta.num_tokens, hidden), dtype, x.device)
    expect(layer, "C", C, (meta.num_tokens, hidden), dtype, x.device)
    if not isinstance(weights, ShortConvWeights):
        raise BackendInputError(f"{layer}: weights must be a ShortConvWeights, got {type(weights).__name__}")
    check_conv_weights(layer, weights, hidden, spec.conv_width, spec.conv_bias, x.device)
    return check_pools(layer, state, {"conv": (hidden, spec.conv_width - 1)},
                       torch_dtype(spec.state_dtype or spec.dtype), x.device, meta)[0]


def check_mamba1(layer: str, spec, x, z, weights, state, meta: SlotStep) -> list[torch.Tensor]:
    """Raise BackendInputError on any mismatch; return the conv and ssm pools."""
    dtype, DI, N, R = torch_dtype(spec.dtype), spec.d_inner, spec.d_state, spec.dt_rank
    expect(layer, "x", x, (meta.num_tokens, DI), dtype)
    expect(layer, "z", z, (meta.num_tokens, DI), dtype, x.device)
    if not isinstance(weights, Mamba1Weights):
        raise BackendInputError(f"{layer}: weights must be a Mamba1Weights, got {type(weights).__name__}")
    check_conv_weights(layer, weights, DI, spec.d_conv, spec.conv_bias, x.device)
    for name, shape in (("x_proj_weight", (R + 2 * N, DI)), ("dt_proj_weight", (DI, R)), ("dt_proj_bias", (DI,)),
                        ("A", (DI, N)), ("D", (DI,))):
        expect(layer, name, getattr(weights, name), shape, device=x.device)
    return check_pools(layer, state, {"conv": (DI, spec.d_conv - 1), "ssm": (DI, N)},
                       torch_dtype(spec.state_dtype or spec.dtype), x.device, meta)


def rows_contiguous(t: torch.Tensor | None) -> torch.Tensor | None:
    """``t`` with its last dimension contiguous, as the kernels address it (a copy only where it is not)."""
    return t if t is None or t.stride(-1) == 1 else t.contiguous()
