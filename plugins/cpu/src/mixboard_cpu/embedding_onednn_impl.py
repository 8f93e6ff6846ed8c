"""The ``embedding_onednn`` impl: the tied table once, column-major
(``onednn.column_major``); F.linear over it where this torch has no oneDNN."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mixboard import EmbeddingImpl

from . import onednn


class EmbeddingOneDnnImpl(EmbeddingImpl):
    def __init__(self, spec):
        self.spec = spec

    def load(self, weights) -> None:
        self.table = onednn.column_major(weights.weight.detach().float())
        self.onednn = onednn.usable()

    def forward(self, ids):
        return F.embedding(ids, self.table)

    def logits(self, hidden):
        if hidden.dtype != torch.float32:
            hidden = hidden.float()
        return onednn.product(hidden, self.table, None) if self.onednn else F.linear(hidden, self.table)
