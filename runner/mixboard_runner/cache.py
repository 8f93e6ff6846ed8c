"""The cache manager: state pools allocated from the plan's state specs.

It never asks what kind a layer is: a group's StateSpec says 'paged' (pool
of blocks, shared block ids for all paged layers, a block table per
sequence) or 'slots' (one record per sequence), with the tensors' shapes
and dtypes. The memory budget pays for one slot per concurrent sequence
first, then for as many blocks as fit.
"""

from __future__ import annotations

import heapq
import math
from collections import deque

import torch

from mixboard.dtypes import torch_dtype
from mixboard.errors import UsageError
from mixboard.state import PAGED
from mixboard.ops.huge_pages import huge_pages

DEFAULT_BLOCK_SIZE = 16


class CacheManager:
    def __init__(self, plan, device: torch.device | str, memory_bytes: int, max_seqs: int,
                 block_size: int = DEFAULT_BLOCK_SIZE):
        # a backend may need blocks of a multiple of some size (flash-attn: 256)
        self.block_size = block_size = math.lcm(block_size, plan.block_multiple)
        groups = [g for g in plan.groups if g.state_spec.tensors]  # a layer that keeps no state gets no pool
        paged = [(name, g.state_spec) for g in groups if g.state_spec.layout == PAGED for name in g.layers]
        slots = [(name, g.state_spec) for g in groups if g.state_spec.layout != PAGED for name in g.layers]
        block_bytes = block_size * sum(spec.record_bytes() for _, spec in paged)
        slot_bytes = sum(spec.record_bytes() for _, spec in slots)
        self.has_paged, self.has_slots = bool(paged), bool(slots)

        self.num_slots = max_seqs if slot_bytes else 0
        if slot_bytes and self.num_slots * slot_bytes > memory_bytes:
            self.num_slots = memory_bytes // slot_bytes
        self.num_blocks = (memory_bytes - self.num_slots * slot_bytes) // block_bytes if block_bytes else 0
        if (slot_bytes and self.num_slots < 1) or (block_bytes and self.num_blocks < 1):
            need = slot_bytes + block_bytes
            raise UsageError(f"cache memory {memory_bytes} bytes cannot hold one sequence; give at least {need} bytes "
                             f"(--cache-memory)")
        self.max_seqs = self.num_slots if slot_bytes else max_seqs

        self.pools: dict[str, dict[str, torch.Tensor]] = {}
        for name, spec in paged:
            self.pools[name] = {t: _zeros((self.num_blocks, block_size, *ts.shape), torch_dtype(ts.dtype), device)
                                for t, ts in spec.tensors}
        for name, spec in slots:
            self.pools[name] = {t: _zeros((self.num_slots, *ts.shape), torch_dtype(ts.dtype), device)
                                for t, ts in spec.tensors}
        self.free_blocks = deque(range(self.num_blocks))
        # lowest free slot first (a heap): the decodes of a step then hold consecutive slots whenever they can,
        # which backends update in place (mixboard.ops.slots.consecutive) instead of gathering and scattering
        self.free_slots = list(range(self.num_slots))
        self.bytes = self.num_blocks * block_bytes + self.num_slots * slot_bytes

    @property
    def token_capacity(self) -> float:
        """Tokens one sequence could hold at most (inf without paged state)."""
        return self.num_blocks * self.block_size if self.has_paged else math.inf

    def blocks_needed(self, seq, num_tokens: int) -> int:
        if not self.has_paged:
            return 0
        return max(0, -(-(seq.num_computed + num_tokens) // self.block_size) - len(seq.blocks))

    def can_allocate(self, seq, num_tokens: int) -> bool:
        slot_ok = seq.slot is not None or not self.has_slots or bool(self.free_slots)
        return slot_ok and self.blocks_needed(seq, num_tokens) <= len(self.free_blocks)

    def allocate(self, seq, num_tokens: int) -> None:
        """Give ``seq`` room for ``num_tokens`` more tokens (call can_allocate first)."""
        if self.has_slots and seq.slot is None:
            seq.slot = heapq.heappop(self.free_slots)
        for _ in range(self.blocks_needed(seq, num_tokens)):
            seq.blocks.append(self.free_blocks.popleft())

    def free(self, seq) -> None:
        self.free_blocks.extend(seq.blocks)
        seq.blocks = []
        if seq.slot is not None:
            heapq.heappush(self.free_slots, seq.slot)
            seq.slot = None

    def reclaim(self, live) -> None:
        """Every block and slot that no sequence of ``live`` holds is free again."""
        held_blocks = {b for seq in live for b in seq.blocks}
        held_slots = {seq.slot for seq in live if seq.slot is not None}
        self.free_blocks = deque(b for b in range(self.num_blocks) if b not in held_blocks)
        self.free_slots = [s for s in range(self.num_slots) if s not in held_slots]  # sorted: a valid heap

    def all_free(self) -> bool:
        return len(self.free_blocks) == self.num_blocks and len(self.free_slots) == self.num_slots


def _zeros(shape, dtype, device) -> torch.Tensor:
    """A zero pool, on 2 MB pages where the OS allows (mixboard.ops.huge_pages: before its first write)."""
    return huge_pages(torch.empty(shape, dtype=dtype, device=device)).zero_()

