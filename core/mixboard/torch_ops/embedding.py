"""``embedding_torch``: row lookup, and a tied LM head over the same table."""

from __future__ import annotations

import torch.nn.functional as F

from ..kinds.embedding import EmbeddingImpl


class EmbeddingTorchImpl(EmbeddingImpl):
    def __init__(self, spec):
        self.spec = spec

    def load(self, weights) -> None:
        self.weight = weights.weight

    def forward(self, ids):
        return F.embedding(ids, self.weight)

    def logits(self, hidden):
        return F.linear(hidden, self.weight)
