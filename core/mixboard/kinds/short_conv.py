"""Kind ``short_conv``: LFM2's gated short causal convolution.

Boundary: the backend receives B, C and x (the three thirds of ``in_proj``'s
output) plus the conv weights, and returns y before ``out_proj``:

    y = C * causal_conv1d(B * x)                (conv state carried)
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
class ShortConvSpec(MixerSpec):
    """hidden_size: channels (default 1024). conv_width: LFM2's L_cache (3).
    conv_bias: False. state_dtype: None means dtype."""

    hidden_size: int = 1024
    conv_width: int = 3
    conv_bias: bool = False
    state_dtype: str | None = None

    def validate(self) -> None:
        require(self.hidden_size > 0, "hidden_size must be positive")
        require(self.conv_width >= 2, "conv_width must be at least 2")


class ShortConvWeights(Record):
    """The layer's weights the backend needs (tensors):

    conv_weight: [hidden_size, conv_width]
    conv_bias: [hidden_size] or None
    """

    __slots__ = ('conv_weight', 'conv_bias')


class ShortConvImpl(MixerImpl):
    @abstractmethod
    def forward(self, B: "Tensor", C: "Tensor", x: "Tensor", weights: ShortConvWeights,
                state: Mapping[str, "Tensor"], meta: Any) -> "Tensor":
        """B, C, x: [T, hidden_size]. state (canonical): ``conv`` [num_slots,
        hidden_size, conv_width - 1]. Returns y: [T, hidden_size]."""


def short_conv_state(spec: ShortConvSpec) -> StateSpec:
    return StateSpec.slots(conv=((spec.hidden_size, spec.conv_width - 1), spec.state_dtype or spec.dtype))


SHORT_CONV = Kind(
    name="short_conv",
    spec=ShortConvSpec,
    impl=ShortConvImpl,
    state_spec=short_conv_state,
    description="LFM2 gated short causal conv",
    install_hint="pip install mixboard-shortconv",
    conformance="mixboard.testing.conformance.kinds:SHORT_CONV",
)
