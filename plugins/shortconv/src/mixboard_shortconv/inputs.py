"""The checks both short_conv impls run on what reaches them.

Errors name the layer (``impl.layer_name``), what was expected and what
arrived. The checks read only shapes, dtypes, devices and the builder's host
copies, so they never wait for the device.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from mixboard.dtypes import torch_dtype
from mixboard.kinds.short_conv import ShortConvSpec, ShortConvWeights
from mixboard.ops.checks import BackendInputError, expect, expect_pool, expect_state
from mixboard.ops.slot_step import SlotStep


class Expected:
    """The dtypes and shapes a layer of ``spec`` takes, resolved once per impl."""

    def __init__(self, spec: ShortConvSpec):
        self.spec = spec
        self.dtype = torch_dtype(spec.dtype)
        self.state_dtype = torch_dtype(spec.state_dtype or spec.dtype)
        self.hidden = spec.hidden_size
        self.width = spec.conv_width


def check_inputs(layer: str, want: Expected, B: Any, C: Any, x: Any, weights: Any,
                 state: Mapping[str, Any], meta: SlotStep) -> torch.Tensor:
    """Raise BackendInputError on any mismatch; return the conv state pool."""
    expect(layer, "x", x, (meta.num_tokens, want.hidden), want.dtype)
    device = x.device
    expect(layer, "B", B, (meta.num_tokens, want.hidden), want.dtype, device)
    expect(layer, "C", C, (meta.num_tokens, want.hidden), want.dtype, device)
    if not isinstance(weights, ShortConvWeights):
        raise BackendInputError(f"{layer}: weights must be a ShortConvWeights, got {type(weights).__name__}")
    expect(layer, "conv_weight", weights.conv_weight, (want.hidden, want.width), want.dtype, device)
    if want.spec.conv_bias:
        if weights.conv_bias is None:
            raise BackendInputError(f"{layer}: the spec has conv_bias=True but weights.conv_bias is None")
        expect(layer, "conv_bias", weights.conv_bias, (want.hidden,), want.dtype, device)
    elif weights.conv_bias is not None:
        raise BackendInputError(f"{layer}: the spec has conv_bias=False but weights.conv_bias is set")
    expect_state(layer, state, ("conv",))
    pool = state["conv"]
    expect(layer, "state['conv']", pool, (None, want.hidden, want.width - 1), want.state_dtype, device)
    expect_pool(layer, "state['conv']", pool)  # slots may sit in larger pages: records apart
    meta.check_slots(layer, pool.shape[0])
    return pool
