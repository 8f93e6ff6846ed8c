"""A failed request never poisons the engine: whatever raises inside
``generate``, ``stream``, ``step`` or ``score`` (a backend, the sampler, an
interrupt), the engine afterwards holds no block, slot or sequence of that
call, and its next call gives what a fresh engine gives. The models are
small random checkpoints whose outputs depend on every earlier token (a
test below shows that corrupting their state changes them): bamba
(attention and Mamba-2), lfm2 (attention and ShortConv) and mamba (Mamba-1),
so every kind's state is half written by some of these faults."""

from __future__ import annotations

import random
from collections import deque

import pytest
import torch

from checkpoints import make_checkpoint
from faults import STAGES, Trip, inject
from mixboard.errors import UsageError
from mixboard_runner.engine import Engine
from mixboard_runner.sampling import SamplingParams

PARAMS = SamplingParams(max_tokens=6, ignore_eos=True)


@pytest.fixture(scope="module", params=["bamba", "lfm2", "mamba"])
def model(request, tmp_path_factory):
    directory = tmp_path_factory.mktemp(request.param)
    make_checkpoint(request.param, directory)
    return directory


@pytest.fixture(scope="module")
def expected(model):
    return [o.output_ids for o in Engine(model).generate(batch(), PARAMS)]


def make_engine(model):
    # a small token budget: chunked prefills, and decodes beside prefills, within the first steps
    return Engine(model, cache_memory=4 * 2**20, max_batched_tokens=24)


def batch(n=6, seed=1):
    rng = random.Random(seed)
    return [[rng.randrange(160) for _ in range(rng.randint(3, 30))] for _ in range(n)]


def assert_clean(engine):
    assert engine.cache.all_free(), "blocks or slots are still held"
    assert not engine.scheduler.has_work(), "sequences are still queued"


def test_the_oracle_can_fail_corrupted_state_changes_the_outputs(model, expected):
    engine = make_engine(model)
    seqs = [engine.add(p, PARAMS) for p in batch()]
    for _ in range(4):
        engine.step()
    torch.manual_seed(0)
    for pool in engine.cache.pools.values():
        for tensor in pool.values():
            tensor.copy_(torch.randn_like(tensor))
    while engine.scheduler.has_work():
        engine.step()
    assert [s.output_ids for s in seqs] != expected


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("error", [RuntimeError("injected"), KeyboardInterrupt()], ids=["error", "interrupt"])
def test_a_failed_generate_leaves_nothing_and_the_next_call_is_exact(stage, error, model, expected, monkeypatch):
    engine = make_engine(model)
    trip = Trip(3, error)  # the third step: some prompts decode, others are still prefilling
    inject(engine, stage, trip, monkeypatch)
    with pytest.raises(type(error)):
        engine.generate(batch(), PARAMS)
    assert trip.calls >= 3
    assert_clean(engine)
    assert [o.output_ids for o in engine.generate(batch(), PARAMS)] == expected
    assert_clean(engine)


@pytest.mark.parametrize("stage", ["metadata", "first layer", "last layer", "sample"])
def test_a_failed_step_requeues_its_batch_and_the_run_goes_on_exactly(stage, model, expected, monkeypatch):
    engine = make_engine(model)
    seqs = [engine.add(p, PARAMS) for p in batch()]
    engine.step()
    engine.step()
    trip = Trip(1, RuntimeError("injected"))
    inject(engine, stage, trip, monkeypatch)
    with pytest.raises(RuntimeError):
        engine.step()
    # the failed batch holds nothing and waits; whatever it half wrote is recomputed, never read
    held = {b for s in engine.scheduler.running for b in s.blocks}
    assert all(not s.blocks and s.slot is None for s in engine.scheduler.waiting)
    assert len(engine.cache.free_blocks) == engine.cache.num_blocks - len(held)
    while engine.scheduler.has_work():
        engine.step()
    assert [s.output_ids for s in seqs] == expected
    assert_clean(engine)


def test_an_interrupted_progress_callback_aborts_the_call(model, expected):
    engine = make_engine(model)

    def progress(engine, finished):
        if engine.stats.steps == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        engine.generate(batch(), PARAMS, progress=progress)
    assert_clean(engine)
    assert [o.output_ids for o in engine.generate(batch(), PARAMS)] == expected


def test_a_bad_prompt_queues_none_of_the_call(model, expected):
    engine = make_engine(model)
    prompts = batch()
    with pytest.raises(UsageError, match="outside the vocabulary"):
        engine.generate(prompts[:3] + [[1, 9999]] + prompts[3:], PARAMS)
    assert_clean(engine)
    assert [o.output_ids for o in engine.generate(prompts, PARAMS)] == expected


def test_a_stream_closed_early_aborts_its_requests(model, expected):
    engine = make_engine(model)
    tokens = engine.stream(batch(), PARAMS)
    for _ in range(5):
        next(tokens)
    assert engine.scheduler.has_work()
    tokens.close()
    assert_clean(engine)
    assert [o.output_ids for o in engine.generate(batch(), PARAMS)] == expected


@pytest.mark.parametrize("stage", ["first layer", "last layer"])
def test_a_failed_score_leaves_nothing_and_scores_again_exactly(stage, model, monkeypatch):
    engine = make_engine(model)
    ids = batch(1)[0]
    want = engine.score(ids, 5)
    inject(engine, stage, Trip(3, RuntimeError("injected")), monkeypatch)
    with pytest.raises(RuntimeError):
        engine.score(ids, 5)
    assert_clean(engine)
    assert (engine.score(ids, 5) == want).all()


def test_a_stream_never_started_queues_nothing(model):
    engine = make_engine(model)
    tokens = engine.stream(batch(), PARAMS)
    tokens.close()
    assert_clean(engine)


class LosingDeque(deque):
    """Free blocks whose ``popleft`` is interrupted after it took the block: a block no one holds."""

    def __init__(self, items, trip):
        super().__init__(items)
        self.trip = trip

    def popleft(self):
        block = super().popleft()
        self.trip()
        return block


def test_an_interrupt_inside_the_cache_bookkeeping_loses_no_block(model, expected):
    engine = make_engine(model)
    if not engine.cache.has_paged:
        pytest.skip("this model keeps no blocks")
    engine.cache.free_blocks = LosingDeque(engine.cache.free_blocks, Trip(5, KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        engine.generate(batch(), PARAMS)
    assert_clean(engine)
    assert [o.output_ids for o in engine.generate(batch(), PARAMS)] == expected
