"""Kind ``short_conv``: LFM2's gated short causal convolution.

Boundary: the backend receives B, C and x (the three thirds of ``in_proj``'s
output) plus the conv weights, and returns y before ``out_proj``:

    y = C * causal_conv1d(B * x)                (conv state carried)
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, Any, Mapping

from ..state import StateSpec
from .base import Kind, MixerImpl, MixerSpec, Record, require, spec_class

if TYPE_CHECKING:
    from torch import Tensor


@spec_class
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
    """The impl interface of kind ``short_conv``: ``forward(B, C, x, weights, state, meta)``.

    The rules every kind shares (lifecycle, strides of inputs and pools,
    what may change) are ``help(mixboard.kinds.MixerImpl)``; the step's
    rows, slots and fresh sequences are
    ``help(mixboard.CommonBatchMetadata)``. HS = hidden_size,
    W = conv_width, T = num_tokens.

    B, C, x: [T, HS] each. The three thirds of in_proj's output, in that
        order (LFM2's B, C and x).
    weights: ``ShortConvWeights`` (``help(ShortConvWeights)``):
        conv_weight [HS, W], conv_bias [HS] or None.
    state (canonical, 'slots', in ``state_dtype or dtype``):
        ``conv`` [num_slots, HS, W - 1]: the sequence's last W - 1 conv
        inputs, which are ``B * x`` (not x), oldest first: column -1 is the
        newest; a sequence that has seen fewer keeps zeros in the oldest.
        Each slot's record is contiguous; slots are ``stride(0)`` apart,
        which may exceed a record.
    meta: the builder's output for the step.
    Returns: y [T, HS], before ``out_proj``, in the dtype of x.

    What it computes, per sequence i, starting from a zero conv state if
    context_lens[i] is 0, else from the record at slot state_slots[i]:

        u = B * x
        y[t, c] = C[t, c] * (conv_bias[c] + sum_k conv_weight[c, k] * u[t - (W - 1) + k, c])

    where u before the step's first token comes from the conv state.
    Afterwards the sequence's slot holds its last W - 1 values of u.
    The oracle, ``mixboard.testing.ShortConvOracle``, is the definition.
    """

    @abstractmethod
    def forward(self, B: "Tensor", C: "Tensor", x: "Tensor", weights: ShortConvWeights,
                state: Mapping[str, "Tensor"], meta: Any) -> "Tensor":
        """y = C * conv(B * x), the conv state carried in slots; return [T, hidden_size] (see the class docstring)."""


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
    row_inputs={"forward": 3},
)
