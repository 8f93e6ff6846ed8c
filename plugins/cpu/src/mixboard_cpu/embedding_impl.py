"""The ``embedding_cpu`` impl: one copy of a tied table, as panels. Row t
is ``panels[t // 16, :, t % 16]``; the LM head is the panels' product."""

from __future__ import annotations

import torch

from mixboard import EmbeddingImpl

from . import _panels  # noqa: E402  (after torch: the kernel then shares torch's OpenMP runtime)
from .panels import PANEL, product, to_panels


class EmbeddingCpuImpl(EmbeddingImpl):
    def __init__(self, spec):
        self.spec = spec

    def load(self, weights) -> None:
        self.panels = to_panels(weights.weight.detach())

    def forward(self, ids):
        if ids.numel():  # an id past the table would read the last panel's zero padding, or wrap around
            low, high = torch.aminmax(ids)
            if int(low) < 0 or int(high) >= self.spec.num_embeddings:
                bad = int(low) if int(low) < 0 else int(high)
                raise IndexError(f"{self.layer_name}: token id {bad} is outside the table's "
                                 f"{self.spec.num_embeddings} rows")
        return self.panels[ids // PANEL, :, ids % PANEL]

    def logits(self, hidden):
        return product(_panels.linear, hidden, self.panels, self.spec.num_embeddings)
