"""Checks of what reaches a mamba1 impl; every error names the layer, what
was expected and what arrived (mixboard.ops.checks)."""

from __future__ import annotations

import torch

from mixboard.dtypes import torch_dtype
from mixboard.kinds.mamba1 import Mamba1Spec, Mamba1Weights
from mixboard.ops.checks import BackendInputError, expect, expect_pool, expect_state
from mixboard.ops.slot_step import SlotStep


class InputChecks:
    """An impl's checks of its inputs. The weights are checked once per
    Mamba1Weights object (frozen, so it cannot change afterwards); activations,
    pools and the step's slots on every call."""

    def __init__(self, spec: Mamba1Spec):
        self.spec = spec
        self.dtype = torch_dtype(spec.dtype)
        self.state_dtype = torch_dtype(spec.ssm_dtype)
        self.conv_dtype = torch_dtype(spec.conv_dtype)
        self._checked: tuple[object, torch.device] | None = None

    def __call__(self, layer: str, x, z, weights, state, meta: SlotStep) -> None:
        spec = self.spec
        DI, N, W = spec.d_inner, spec.d_state, spec.d_conv
        expect(layer, "x", x, (meta.num_tokens, DI), dtype=self.dtype)
        device = x.device
        expect(layer, "z", z, (meta.num_tokens, DI), dtype=self.dtype, device=device)
        if self._checked is None or self._checked[0] is not weights or self._checked[1] != device:
            self.check_weights(layer, weights, device)
            self._checked = (weights, device)
        expect_state(layer, state, ("conv", "ssm"))
        expect(layer, "state 'conv'", state["conv"], (None, DI, W - 1), dtype=self.conv_dtype, device=device)
        expect(layer, "state 'ssm'", state["ssm"], (None, DI, N), dtype=self.state_dtype, device=device)
        expect_pool(layer, "state 'conv'", state["conv"])  # slots may sit in larger pages: records apart
        expect_pool(layer, "state 'ssm'", state["ssm"])
        meta.check_slots(layer, min(state["conv"].shape[0], state["ssm"].shape[0]))
        if meta.common.query_start_loc.device != device:
            raise BackendInputError(f"{layer}: the step's metadata must be on {device}, "
                                    f"got {meta.common.query_start_loc.device}")

    def check_weights(self, layer: str, weights, device: torch.device) -> None:
        spec = self.spec
        DI, N, R, W = spec.d_inner, spec.d_state, spec.dt_rank, spec.d_conv
        if not isinstance(weights, Mamba1Weights):
            raise BackendInputError(f"{layer}: weights must be Mamba1Weights, got {type(weights).__name__}")
        expect(layer, "conv_weight", weights.conv_weight, (DI, W), device=device)
        if spec.conv_bias:
            if weights.conv_bias is None:
                raise BackendInputError(f"{layer}: conv_bias must be a tensor of shape [{DI}] "
                                        f"(the spec has conv_bias=True), got None")
            expect(layer, "conv_bias", weights.conv_bias, (DI,), device=device)
        elif weights.conv_bias is not None:
            raise BackendInputError(f"{layer}: conv_bias must be None (the spec has conv_bias=False), got a tensor")
        expect(layer, "x_proj_weight", weights.x_proj_weight, (R + 2 * N, DI), device=device)
        expect(layer, "dt_proj_weight", weights.dt_proj_weight, (DI, R), device=device)
        expect(layer, "dt_proj_bias", weights.dt_proj_bias, (DI,), device=device)
        expect(layer, "A", weights.A, (DI, N), device=device)
        expect(layer, "D", weights.D, (DI,), device=device)
        norms = {"dt_norm_weight": R, "b_norm_weight": N, "c_norm_weight": N}
        for name, width in norms.items():
            if spec.dt_bc_norms:
                expect(layer, name, getattr(weights, name), (width,), device=device)
            elif getattr(weights, name) is not None:
                raise BackendInputError(f"{layer}: {name} must be None (the spec has dt_bc_norms=False), got a tensor")


def as_float(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.float()
