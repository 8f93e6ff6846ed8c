"""Kind ``argmax``: greedy sampling, the largest logit of each row."""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING

from .base import Kind, MixerSpec, require, spec_class
from .op import OpImpl, no_state

if TYPE_CHECKING:
    from torch import Tensor


@spec_class
class ArgmaxSpec(MixerSpec):
    """vocab_size: the width of a row of logits (32000)."""

    vocab_size: int = 32000

    def validate(self) -> None:
        require(self.vocab_size > 0, "vocab_size must be positive")


class ArgmaxImpl(OpImpl):
    """The impl interface of kind ``argmax``: ``forward(logits)``.

    logits: [N, vocab_size]. Returns int64 [N] on the same device: per row
    the index of the largest value, the first one on ties; a row holding
    NaN gives the index of its first NaN (as ``torch.argmax``).
    The oracle, ``mixboard.testing.ArgmaxOracle``, is the definition.
    """

    @abstractmethod
    def forward(self, logits: "Tensor") -> "Tensor":
        """The index of each row's largest logit."""


ARGMAX = Kind(
    name="argmax",
    spec=ArgmaxSpec,
    impl=ArgmaxImpl,
    state_spec=no_state,
    description="greedy sampling: each row's largest logit",
    install_hint="argmax_torch ships with mixboard itself; reinstall mixboard",
    conformance="mixboard.testing.conformance.op_kinds:ARGMAX",
    row_inputs={"forward": 1},
)
