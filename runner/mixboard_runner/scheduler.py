"""Continuous batching: every step mixes decodes of running sequences with
prefill chunks of new (or resumed) ones, under a token budget.

Long prompts are prefilled in chunks. When the cache cannot give a running
sequence room for its next token, the most recently admitted sequence is
preempted: its blocks and slot are freed and it waits to be recomputed from
its tokens (prompt and what it generated so far).
"""

from __future__ import annotations

from collections import deque

from .cache import CacheManager
from .sequence import Sequence, Status


class Scheduler:
    def __init__(self, cache: CacheManager, max_seqs: int, max_batched_tokens: int):
        self.cache = cache
        self.max_seqs = max_seqs
        self.max_batched_tokens = max_batched_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.preemptions = 0

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def abort(self, seq: Sequence) -> None:
        if seq in self.waiting:
            self.waiting.remove(seq)
        if seq in self.running:
            self.running.remove(seq)
        self.finish(seq, "abort")

    def finish(self, seq: Sequence, reason: str) -> None:
        self.cache.free(seq)
        seq.status, seq.finish_reason = Status.FINISHED, reason
        if seq in self.running:
            self.running.remove(seq)

    def schedule(self) -> list[tuple[Sequence, int]]:
        """(sequence, tokens to process this step), decodes first."""
        budget = self.max_batched_tokens
        batch: list[tuple[Sequence, int]] = []
        for seq in list(self.running):  # oldest first: they keep their place
            if seq.status is not Status.RUNNING:
                continue  # preempted earlier in this loop
            want = min(seq.num_uncomputed, budget)
            if want < 1:
                break
            while not self.cache.can_allocate(seq, want):
                victim = self.running[-1]
                self._preempt(victim)
                if victim is seq:
                    break
            if seq.status is not Status.RUNNING:
                continue
            self.cache.allocate(seq, want)
            batch.append((seq, want))
            budget -= want
        while self.waiting and budget > 0 and len(self.running) < self.max_seqs:
            seq = self.waiting[0]
            want = min(seq.num_uncomputed, budget)
            if not self.cache.can_allocate(seq, want):
                break
            self.waiting.popleft()
            self.cache.allocate(seq, want)
            seq.status = Status.RUNNING
            self.running.append(seq)
            batch.append((seq, want))
            budget -= want
        # the metadata contract: decodes (one token after earlier context) come first
        batch.sort(key=lambda item: not (item[1] == 1 and item[0].num_computed > 0))
        return batch

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.cache.free(seq)
        seq.num_computed = 0
        seq.status = Status.WAITING
        self.waiting.appendleft(seq)
        self.preemptions += 1
