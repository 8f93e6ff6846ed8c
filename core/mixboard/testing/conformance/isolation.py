"""State isolation: a step may touch only the records of its own sequences.

The kit fills a backend's pools with a poison value before the first step,
so a backend that reads a record it does not own (a fresh sequence's stale
slot, a padded block-table entry left unmasked) is off by far more than any
tolerance. After each step every record the step's sequences do not own -
other sequences' slots and blocks, parked ones included, and the free ones -
must be bit for bit what it was. Which records a sequence owns follows from
the layout the backend's ``state_spec`` declares, never from its contents.
"""

from __future__ import annotations

from typing import Iterable, Mapping

import torch

from ...state import PAGED

# Finite, so that a correct backend that reads padding and masks it (a 0 weight,
# or -inf logits) stays finite; large next to the kit's inputs of order one.
POISON = 37.0


def poison(state: Mapping[str, torch.Tensor]) -> None:
    for pool in state.values():
        pool.fill_(POISON)


def owned_records(layout: str, owned: Iterable[tuple[int, tuple[int, ...]]]) -> set[int]:
    """The records the step's sequences own: their blocks (paged) or slots.
    ``owned`` holds (slot, blocks in use) per sequence of the step."""
    if layout == PAGED:
        return {b for _, blocks in owned for b in blocks}
    return {slot for slot, _ in owned}


def changed_foreign_record(layout: str, before: Mapping[str, torch.Tensor], after: Mapping[str, torch.Tensor],
                           owned: set[int]) -> str | None:
    """A sentence naming the first record outside ``owned`` that changed, or None."""
    unit = "block" if layout == PAGED else "slot"
    for name, pool in after.items():
        old = before[name]
        foreign = [r for r in range(pool.shape[0]) if r not in owned]
        if not foreign:
            continue
        index = torch.tensor(foreign, device=pool.device)
        # Compared as bytes: bit for bit, and a NaN the backend left equals itself.
        new_bytes = pool.index_select(0, index).contiguous().view(torch.uint8).flatten(1)
        old_bytes = old.index_select(0, index).contiguous().view(torch.uint8).flatten(1)
        differs = (new_bytes != old_bytes).any(1)
        if not bool(differs.any()):
            continue
        first = foreign[int(differs.nonzero()[0])]
        return (f"state[{name!r}] {unit} {first} changed, which belongs to no sequence of the step "
                f"(the step's sequences own {unit}s {sorted(owned)})")
    return None
