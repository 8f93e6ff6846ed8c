"""Kind ``mamba1``: Mamba's selective scan (S6) with its causal conv.

Boundary: the backend receives x and z (the two halves of ``in_proj``'s
output) plus the layer's conv, x_proj, dt_proj, A and D weights, and returns
y before ``out_proj``:

    x  = silu(causal_conv1d(x))                 (conv state carried)
    dt, B, C = split(x @ x_proj_weight.T, [dt_rank, d_state, d_state])
    dt = softplus(dt @ dt_proj_weight.T + dt_proj_bias)
    h  = exp(dt * A) * h + dt * B * x           (per channel, per state; ssm state carried)
    y  = (h @ C + D * x) * silu(z)
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from ..state import StateSpec
from .base import Kind, MixerImpl, MixerSpec, Record, require

if TYPE_CHECKING:
    from torch import Tensor


@dataclass(frozen=True)
class Mamba1Spec(MixerSpec):
    """d_inner: channels after in_proj (default 1536). d_state: 16.
    d_conv: conv width (4). dt_rank: 48. conv_bias: True.
    state_dtype: dtype of the SSM and conv states; None means dtype."""

    d_inner: int = 1536
    d_state: int = 16
    d_conv: int = 4
    dt_rank: int = 48
    conv_bias: bool = True
    state_dtype: str | None = None

    def validate(self) -> None:
        require(min(self.d_inner, self.d_state, self.dt_rank) > 0, "d_inner, d_state and dt_rank must be positive")
        require(self.d_conv >= 2, "d_conv (the conv width) must be at least 2")


class Mamba1Weights(Record):
    """The layer's weights the backend needs (tensors):

    conv_weight: [d_inner, d_conv]
    conv_bias: [d_inner] or None
    x_proj_weight: [dt_rank + 2 * d_state, d_inner]
    dt_proj_weight: [d_inner, dt_rank]
    dt_proj_bias: [d_inner]
    A: [d_inner, d_state], negative: -exp(A_log), computed once at load
    D: [d_inner]
    """

    __slots__ = ('conv_weight', 'conv_bias', 'x_proj_weight', 'dt_proj_weight', 'dt_proj_bias', 'A', 'D')


class Mamba1Impl(MixerImpl):
    @abstractmethod
    def forward(self, x: "Tensor", z: "Tensor", weights: Mamba1Weights, state: Mapping[str, "Tensor"], meta: Any) -> "Tensor":
        """x, z: [T, d_inner]. state (canonical): ``conv`` [num_slots, d_inner,
        d_conv - 1] holding the last inputs of the conv, ``ssm`` [num_slots,
        d_inner, d_state]. Returns y: [T, d_inner]."""


def mamba1_state(spec: Mamba1Spec) -> StateSpec:
    dtype = spec.state_dtype or spec.dtype
    return StateSpec.slots(conv=((spec.d_inner, spec.d_conv - 1), dtype), ssm=((spec.d_inner, spec.d_state), dtype))


MAMBA1 = Kind(
    name="mamba1",
    spec=Mamba1Spec,
    impl=Mamba1Impl,
    state_spec=mamba1_state,
    description="Mamba selective scan (S6) with causal conv",
    install_hint="pip install mixboard-mamba1",
    conformance="mixboard.testing.conformance.kinds:MAMBA1",
)
