"""A bounded soak of one engine: a few thousand requests of random lengths
with aborts, preemptions, failed steps, failed calls and streams closed
early. Afterwards no block or slot is held, resident memory stayed flat
from round to round, and every request that ran to its end generated what
its prompt generates alone."""

from __future__ import annotations

import os
import random

import pytest

from checkpoints import make_checkpoint
from faults import FaultyImpl, Trip
from mixboard_runner.engine import Engine
from mixboard_runner.sampling import SamplingParams
from mixboard_runner.sequence import Status

ROUNDS, REQUESTS = 6, 500  # per round
MAX_TOKENS = 10
CACHE = 2**19  # 384 tokens for 16 sequences of up to 58: preemptions all the time


def resident_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads resident memory from /proc")
def test_soak(tmp_path):
    # bamba (attention and Mamba-2): its outputs depend on every earlier token, so state a failed
    # step, a preemption or an abort left behind would change them
    make_checkpoint("bamba", tmp_path)
    rng = random.Random(2026)
    pool = [[rng.randrange(160) for _ in range(rng.randint(1, 48))] for _ in range(120)]
    alone = Engine(tmp_path)
    greedy = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)
    reference = [alone.generate([p], greedy)[0].output_ids for p in pool]
    engine = Engine(tmp_path, cache_memory=CACHE, max_batched_tokens=64, max_seqs=16)
    layers = list(engine.runtimes)
    counts = dict(aborts=0, failed_steps=0, failed_calls=0)
    resident = []
    for _ in range(ROUNDS):
        # a call that fails part way, and a stream its consumer drops, leave nothing behind
        name = rng.choice(layers)
        impl, state, builder = engine.runtimes[name]
        engine.runtimes[name] = (FaultyImpl(impl, Trip(2, RuntimeError("injected")), after=True), state, builder)
        with pytest.raises(RuntimeError):
            engine.generate(rng.sample(pool, 4), greedy)
        engine.runtimes[name] = (impl, state, builder)
        counts["failed_calls"] += 1
        stream = engine.stream(rng.sample(pool, 4), greedy)
        for _ in range(3):
            next(stream)
        stream.close()
        assert engine.cache.all_free() and not engine.scheduler.has_work()

        live, submitted = [], 0
        while submitted < REQUESTS or engine.scheduler.has_work():
            while submitted < REQUESTS and len(engine.scheduler.waiting) < 8:
                i, n = rng.randrange(len(pool)), rng.randint(1, MAX_TOKENS)
                live.append((engine.add(pool[i], SamplingParams(max_tokens=n, ignore_eos=True)), i, n))
                submitted += 1
            roll = rng.random()
            unfinished = [s for s, _, _ in live[-32:] if s.status is not Status.FINISHED]
            if roll < 0.03 and unfinished:
                engine.abort(rng.choice(unfinished))
                counts["aborts"] += 1
            if roll > 0.98:  # one layer of this step raises after writing its state
                name = rng.choice(layers)
                impl, state, builder = engine.runtimes[name]
                engine.runtimes[name] = (FaultyImpl(impl, Trip(1, RuntimeError("injected")), after=True),
                                         state, builder)
                try:
                    engine.step()
                except RuntimeError:
                    counts["failed_steps"] += 1
                finally:
                    engine.runtimes[name] = (impl, state, builder)
            else:
                engine.step()
        assert engine.cache.all_free() and not engine.scheduler.has_work()
        for seq, i, n in live:
            assert seq.status is Status.FINISHED
            if seq.finish_reason != "abort":
                assert (seq.finish_reason, seq.output_ids) == ("length", reference[i][:n]), seq
        resident.append(resident_bytes())
    assert engine.scheduler.preemptions > 50 and counts["aborts"] > 20 and counts["failed_steps"] > 20, counts
    # the first rounds warm the allocator up; after them resident memory stays put
    assert max(resident[2:]) - resident[1] < 16 * 2**20, [r // 2**20 for r in resident]
