"""Per-sequence state records ('slots' layout): gather and scatter by slot,
or a view of the pool where the slots are consecutive."""

from __future__ import annotations

from typing import Sequence

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


def consecutive(slots: Sequence[int]) -> tuple[int, int] | None:
    """(first, stop) when ``slots`` are first, first + 1, ..., stop - 1, else
    None. Such records are a slice of the pool, read and updated in place:
    a decode step then moves each record once instead of three times (gather,
    update, scatter). It is the usual case, as runners hand out slots in order."""
    if not len(slots):
        return None
    first = slots[0]
    for i, slot in enumerate(slots):
        if slot != first + i:
            return None
    return first, first + len(slots)


class SlotRecords:
    """The records of some sequences in one pool: a view of the pool when
    ``slot_range`` is given (see ``consecutive``), else a gathered copy that
    ``store`` scatters back. Either way, ``store(new)`` leaves ``new`` in the pool."""

    def __init__(self, pool: torch.Tensor, slots: torch.Tensor, slot_range: tuple[int, int] | None):
        self.pool, self.slots, self.slot_range = pool, slots, slot_range
        self.records = pool[slot_range[0]:slot_range[1]] if slot_range is not None else pool.index_select(0, slots)

    def store(self, records: torch.Tensor) -> None:
        if self.slot_range is None:
            self.pool.index_copy_(0, self.slots, records.to(self.pool.dtype))
        elif records is not self.records:
            self.records.copy_(records)
