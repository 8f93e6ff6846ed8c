"""Continuous batching: every step mixes decodes of running sequences with
prefill chunks of new (or resumed) ones, under a token budget.

Long prompts are prefilled in chunks. When the cache cannot give a running
sequence room for its next token, the most recently admitted sequence is
preempted: its blocks and slot are freed and it waits to be recomputed from
its tokens (prompt and what it generated so far). A step that failed puts
its sequences back the same way.

Each change of the queues keeps every live sequence in one of them at every
moment, so that ``reclaim`` can make the queues and the cache agree again
after an interrupt (Ctrl-C) lands in the middle of one.
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
            self.cache.allocate(seq, want)
            seq.status = Status.RUNNING
            self.running.append(seq)
            self.waiting.popleft()
            batch.append((seq, want))
            budget -= want
        # the metadata contract: decodes (one token after earlier context) come first
        batch.sort(key=lambda item: not (item[1] == 1 and item[0].num_computed > 0))
        return batch

    def _preempt(self, seq: Sequence) -> None:
        self._requeue(seq)
        self.preemptions += 1

    def _requeue(self, seq: Sequence) -> None:
        """Back to the front of the queue, to be computed again from its tokens."""
        self.waiting.appendleft(seq)
        self.running.remove(seq)
        seq.status = Status.WAITING
        seq.num_computed = 0  # before the state goes: never a waiting sequence that claims context it lost
        self.cache.free(seq)

    def recompute(self, seqs: list[Sequence]) -> None:
        """After a failed step: ``seqs`` may hold half-written state; they
        wait to be recomputed (in their order), holding no block or slot."""
        for seq in reversed(seqs):
            if seq in self.running:
                self._requeue(seq)
        self.reclaim()

    def reclaim(self) -> None:
        """Make the queues and the cache agree after an interrupted change:
        finished sequences leave the queues, each live one is queued once,
        waiting ones hold nothing, and every block and slot no running
        sequence holds is free. Only failure paths call it: on a clean run it
        would hide a leak."""
        running = [s for s in dict.fromkeys(self.running) if s.status is Status.RUNNING]
        taken = set(running)
        waiting = [s for s in dict.fromkeys(self.waiting) if s.status is not Status.FINISHED and s not in taken]
        for seq in waiting:  # a waiting sequence starts over: it holds no state
            seq.status, seq.num_computed, seq.blocks, seq.slot = Status.WAITING, 0, [], None
        self.running, self.waiting = running, deque(waiting)
        self.cache.reclaim(running)
