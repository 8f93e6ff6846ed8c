"""Pools laid out as an engine's hybrid cache lays them: each record in a larger page.

vLLM gives every layer of a hybrid model pages of one size: an attention
layer's K and V blocks are two slices of a page, a mamba layer's conv and
SSM states two slices of a page per slot, and a page may be padded to the
largest layer's. So a pool is ``[num_records, ...]`` with each record
contiguous and ``stride(0)`` larger than the record, and the bytes between
records belong to someone else. The case ``strided_pools`` hands a backend
its pools that way: the pools of a layer share one page per record, each
starting 64 bytes past the previous one's end (a backend that runs over a
record lands in padding, not in the next pool), and a tail pads the page to
about 1.5 times its records, so that ``stride(0)`` is no multiple of a
record. Records and strides stay 64-byte aligned (a cache line), as an
engine's pages are: a kernel's vector loads meet no alignment the engine
would not give them.

The padding is filled with ``PAD`` and must stay bit for bit as it was: a
backend that writes through a flat view of the pool, or addresses record
``i`` at ``i * record_size``, writes into it (or into another record).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...dtypes import torch_dtype
from ...state import PAGED, StateSpec

ALIGN = 64  # bytes: where records start and how far apart pools are
PAD = -53.0  # float32, written over the whole page first; finite, unlike the kit's other poison


@dataclass
class Pages:
    """The bytes behind a layer's pools: one page per record."""

    buffer: torch.Tensor  # uint8 [records, page_bytes]
    padding: torch.Tensor  # int64 [k]: the byte columns of a page that belong to no pool
    kept: torch.Tensor  # uint8 [records, k]: those bytes as laid out
    owner: list[str]  # per padding column: what it follows ("the start of the page", "state['k_cache']")
    unit: str  # "block" or "slot"

    def changed(self) -> str | None:
        """A sentence naming the first record whose page padding changed, or None."""
        now = self.buffer.index_select(1, self.padding)
        differs = now != self.kept
        if not bool(differs.any()):
            return None
        record, column = (int(i) for i in differs.nonzero()[0])
        count = int(differs[record].sum())
        page = self.buffer.shape[1]
        return (f"the padding of {self.unit} {record}'s page changed ({count} byte(s), the first at byte "
                f"{int(self.padding[column])} of {page}, after {self.owner[column]}): the pools' records sit in "
                f"larger pages, stride(0) elements apart, and the bytes between them are not the pool's; a write through a flat "
                f"view of the pool, or to record i at i * its size, lands there. Address record i at "
                f"i * pool.stride(0) and write only inside records")


def allocate_in_pages(state_spec: StateSpec, records: int, block_size: int, device) -> tuple[dict, Pages]:
    """Pools for ``state_spec`` (as ``allocate_state`` shapes them) inside
    one uint8 page per record, padding filled with ``PAD``."""
    lead = (block_size,) if state_spec.layout == PAGED else ()
    places, at = [], ALIGN  # each pool starts ALIGN bytes past the previous one's end
    for name, t in state_spec.tensors:
        shape = lead + tuple(t.shape)
        size = torch_dtype(t.dtype).itemsize * _numel(shape)
        places.append((name, shape, torch_dtype(t.dtype), at, size))
        at = _up(at + size) + ALIGN
    page = at + _up((at - ALIGN) // 2)  # a tail of about half the records
    # stride(0) no multiple of a record either (a record that divides ALIGN divides every page: let it be)
    while any(page % size == 0 for *_, size in places if ALIGN % size):
        page += ALIGN
    buffer = torch.empty((records, page), dtype=torch.uint8, device=device)
    buffer.view(torch.float32).fill_(PAD)
    state = {name: buffer[:, start:start + size].view(dtype).view(records, *shape)
             for name, shape, dtype, start, size in places}
    # The gaps: before the first pool, after each pool up to the next one (or the page's end).
    gaps = [(0, places[0][3], "the start of the page")] if places else []
    for i, (name, _, _, start, size) in enumerate(places):
        gaps.append((start + size, places[i + 1][3] if i + 1 < len(places) else page, f"state[{name!r}]"))
    padding = torch.cat([torch.arange(a, b) for a, b, _ in gaps]) if gaps else torch.arange(page)
    owner = [what for a, b, what in gaps for _ in range(b - a)]
    padding = padding.to(device)
    pages = Pages(buffer, padding, buffer.index_select(1, padding).clone(), owner,
                  "block" if state_spec.layout == PAGED else "slot")
    return state, pages


def _up(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _numel(shape) -> int:
    size = 1
    for n in shape:
        size *= n
    return size
