"""Kind ``linear``: a layer's product with one weight matrix.

The fused forms a runner relies on are the same kind: q, k and v of an
attention layer (one weight of their rows stacked), and SwiGLU's gate and
up with the gate applied (``gated``), which spares a [T, 2 x out]
intermediate and a pass over it.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING

from .base import Kind, MixerSpec, Record, require, spec_class
from .op import OpImpl, no_state

if TYPE_CHECKING:
    from torch import Tensor


@spec_class
class LinearSpec(MixerSpec):
    """in_features, out_features: [T, in] -> [T, out] (default 1024, 1024).
    bias: whether a bias is added (False). gated: SwiGLU's gate and up in
    one product (False): the weight then holds 2 x out_features rows."""

    in_features: int = 1024
    out_features: int = 1024
    bias: bool = False
    gated: bool = False

    def validate(self) -> None:
        require(self.in_features > 0 and self.out_features > 0, "in_features and out_features must be positive")

    @property
    def weight_rows(self) -> int:
        return 2 * self.out_features if self.gated else self.out_features


class LinearWeights(Record):
    """weight: [rows, in_features]; bias: [rows] or None. rows is
    out_features, or 2 x out_features when gated (the gate's rows, then up's)."""

    __slots__ = ("weight", "bias")


class LinearImpl(OpImpl):
    """The impl interface of kind ``linear``: ``load(LinearWeights)``, then ``forward(x)``.

    weights: weight [rows, in_features], bias [rows] or None; rows is
    out_features, or 2 x out_features when gated (the gate's rows, then up's).
    x: [T, in_features]. Returns [T, out_features] in the layer's dtype:

        y = x @ weight.T + bias                              (gated False)
        g, u = x @ weight[:out].T + bias[:out], x @ weight[out:].T + bias[out:]
        y = silu(g) * u                                      (gated True)

    The rules every dense kind shares: ``help(mixboard.kinds.OpImpl)``.
    The oracle, ``mixboard.testing.LinearOracle``, is the definition.
    """

    @abstractmethod
    def load(self, weights: LinearWeights) -> None:
        """Keep the weight (as it is, or re-laid for the products)."""

    @abstractmethod
    def forward(self, x: "Tensor") -> "Tensor":
        """[T, in_features] -> [T, out_features]."""


LINEAR = Kind(
    name="linear",
    spec=LinearSpec,
    impl=LinearImpl,
    state_spec=no_state,
    description="a product with one weight (q/k/v fused, SwiGLU gate/up fused)",
    install_hint="linear_torch ships with mixboard itself; reinstall mixboard",
    conformance="mixboard.testing.conformance.op_kinds:LINEAR",
    row_inputs={"forward": 1},
)
