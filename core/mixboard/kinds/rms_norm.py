"""Kind ``rms_norm``: RMSNorm, with the residual add before it.

A pre-norm block adds each branch's output to the residual stream and
normalizes the sum for the next branch; one op does both, in one pass
where a backend can (vLLM's and nano-vllm's ``RMSNorm.forward(x,
residual)`` the same way).
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING

from .base import Kind, MixerSpec, Record, require, spec_class
from .op import OpImpl, no_state

if TYPE_CHECKING:
    from torch import Tensor


@spec_class
class RMSNormSpec(MixerSpec):
    """hidden_size: the normalized width (1024). eps: 1e-6.
    residual_fp32: the residual sum is kept in float32 whatever the dtype
    (Mamba's residual_in_fp32; False)."""

    hidden_size: int = 1024
    eps: float = 1e-6
    residual_fp32: bool = False

    def validate(self) -> None:
        require(self.hidden_size > 0, "hidden_size must be positive")
        require(self.eps >= 0, "eps must be >= 0")


class RMSNormWeights(Record):
    """weight: [hidden_size]."""

    __slots__ = ("weight",)


class RMSNormImpl(OpImpl):
    """The impl interface of kind ``rms_norm``: ``load(RMSNormWeights)``, then ``forward(x, residual)``.

    weights: weight [hidden_size].
    x: [..., hidden_size] in the layer's dtype (a branch's output, or
    heads [T, heads, H]).
    residual: None (the first block), or the residual stream, of x's
    shape: in the layer's dtype, or float32 with residual_fp32 after the
    first block. The caller hands it over: the impl may write the sum into it.

    Returns (y, s):
        s = x + residual    (x.float() + residual with residual_fp32; x itself when residual is None)
        y = weight * (sf * rsqrt(mean(sf ** 2, -1) + eps)).to(dtype),  sf = s.float()
    y in the layer's dtype, s in its own (the residual stream, for the next
    add). s may be ``residual`` itself, written, or x itself when residual
    is None; x is never written.
    The oracle, ``mixboard.testing.RMSNormOracle``, is the definition.
    """

    @abstractmethod
    def load(self, weights: RMSNormWeights) -> None:
        """Keep the weight."""

    @abstractmethod
    def forward(self, x: "Tensor", residual: "Tensor | None") -> "tuple[Tensor, Tensor]":
        """(norm(x + residual), x + residual); see the class docstring."""


RMS_NORM = Kind(
    name="rms_norm",
    spec=RMSNormSpec,
    impl=RMSNormImpl,
    state_spec=no_state,
    description="RMSNorm, the residual add before it fused",
    install_hint="rms_norm_torch ships with mixboard itself; reinstall mixboard",
    conformance="mixboard.testing.conformance.op_kinds:RMS_NORM",
    row_inputs={"forward": 2},
)
