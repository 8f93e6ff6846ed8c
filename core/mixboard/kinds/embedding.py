"""Kind ``embedding``: the token table, and the LM head when the model ties them.

A tied model keeps one table for both directions; as one op, a backend
lays it out once for both (packed panels serve the LM head's product and
a row lookup alike) and the model never holds two copies.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING

from .base import Kind, MixerSpec, Record, require, spec_class
from .op import OpImpl, no_state

if TYPE_CHECKING:
    from torch import Tensor


@spec_class
class EmbeddingSpec(MixerSpec):
    """num_embeddings: the vocabulary (32000). embedding_dim: 1024.
    tied: the LM head is this table too (True, as in most small models)."""

    num_embeddings: int = 32000
    embedding_dim: int = 1024
    tied: bool = True

    def validate(self) -> None:
        require(self.num_embeddings > 0 and self.embedding_dim > 0, "num_embeddings and embedding_dim must be positive")


class EmbeddingWeights(Record):
    """weight: [num_embeddings, embedding_dim]."""

    __slots__ = ("weight",)


class EmbeddingImpl(OpImpl):
    """The impl interface of kind ``embedding``: ``load(EmbeddingWeights)``, then ``forward(ids)``.

    When the spec is tied, also ``logits(hidden)``: the LM head.
    weights: weight [num_embeddings, embedding_dim].
    ids: int64 [T], each in range. forward returns weight[ids], [T, embedding_dim].
    hidden: [T, embedding_dim]. logits returns hidden @ weight.T, [T, num_embeddings].
    Both in the layer's dtype. The oracle, ``mixboard.testing.EmbeddingOracle``,
    is the definition.
    """

    @abstractmethod
    def load(self, weights: EmbeddingWeights) -> None:
        """Keep the table (as it is, or re-laid once for both uses)."""

    @abstractmethod
    def forward(self, ids: "Tensor") -> "Tensor":
        """The rows of ``ids``."""

    def logits(self, hidden: "Tensor") -> "Tensor":
        """The LM head's product with the same table (tied specs)."""
        raise NotImplementedError(f"{type(self).__name__} serves untied tables only")


EMBEDDING = Kind(
    name="embedding",
    spec=EmbeddingSpec,
    impl=EmbeddingImpl,
    state_spec=no_state,
    description="token embedding table, shared with the LM head when tied",
    install_hint="embedding_torch ships with mixboard itself; reinstall mixboard",
    conformance="mixboard.testing.conformance.op_kinds:EMBEDDING",
    row_inputs={"forward": 1, "logits": 1},
)
