"""Per-sequence state records ('slots' layout): gather and scatter by slot."""

from __future__ import annotations

import torch


def gather_slots(pool: torch.Tensor, slots: torch.Tensor, fresh: torch.Tensor | None = None) -> torch.Tensor:
    """The records of ``slots`` ([N] int) from ``pool`` ([S, ...]) as a new
    [N, ...] tensor; where ``fresh`` ([N] bool) is True the record is zeros
    (a sequence that starts now must not see a previous owner's state)."""
    records = pool.index_select(0, slots.long())
    if fresh is not None:
        records = records.masked_fill(fresh.view(-1, *([1] * (records.dim() - 1))), 0)
    return records


def scatter_slots(pool: torch.Tensor, slots: torch.Tensor, records: torch.Tensor) -> None:
    """Write ``records`` ([N, ...]) into ``pool`` at ``slots`` in place."""
    pool.index_copy_(0, slots.long(), records.to(pool.dtype))
