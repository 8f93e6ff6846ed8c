"""Several threads on one engine, and tokens streamed as they are made."""

from __future__ import annotations

import random
import threading
import time

from checkpoints import make_checkpoint
from mixboard_runner.engine import Engine
from mixboard_runner.sampling import SamplingParams

PARAMS = SamplingParams(max_tokens=8, ignore_eos=True)


def prompts(n, seed):
    rng = random.Random(seed)
    return [[rng.randrange(160) for _ in range(rng.randint(2, 24))] for _ in range(n)]


def test_threads_sharing_an_engine_each_get_their_own_outputs(tmp_path):
    # bamba: outputs depend on every earlier token, so state mixed between threads' requests would show
    make_checkpoint("bamba", tmp_path)
    engine = Engine(tmp_path, cache_memory=4 * 2**20, max_batched_tokens=48)
    work = {t: prompts(5, seed=t) for t in range(4)}
    alone = {t: [o.output_ids for o in Engine(tmp_path).generate(ps, PARAMS)] for t, ps in work.items()}
    got, errors = {}, []
    start = threading.Barrier(len(work))

    def client(t):
        try:
            start.wait()
            got[t] = [[o.output_ids for o in engine.generate(work[t], PARAMS)] for _ in range(3)]
        except BaseException as exc:  # reported below: a thread's error must fail the test
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(t,), daemon=True) for t in work]
    for th in threads:
        th.start()
    deadline = time.monotonic() + 120  # a broken lock spins forever: fail instead
    for th in threads:
        th.join(timeout=max(0.0, deadline - time.monotonic()))
    assert not errors and not any(th.is_alive() for th in threads)
    assert got == {t: [alone[t]] * 3 for t in work}
    assert engine.cache.all_free() and not engine.scheduler.has_work()


def test_stream_yields_each_token_before_its_request_ends():
    engine = Engine("demo")
    batch = prompts(3, seed=7)
    whole = engine.generate(batch, PARAMS)
    seen = {i: [] for i in range(len(batch))}
    texts = {i: "" for i in range(len(batch))}
    reasons = {}
    running_at_first = None
    for token in engine.stream(batch, PARAMS):
        if running_at_first is None:
            running_at_first = engine.scheduler.has_work()
        seen[token.index].append(token.token_id)
        texts[token.index] += token.text
        if token.finish_reason:
            reasons[token.index] = token.finish_reason
    assert running_at_first, "the first token came only after every request ended"
    assert [seen[i] for i in range(len(batch))] == [o.output_ids for o in whole]
    assert [texts[i] for i in range(len(batch))] == [o.text for o in whole]
    assert reasons == {i: o.finish_reason for i, o in enumerate(whole)}
    assert engine.cache.all_free()


def test_streamed_text_holds_back_half_a_character():
    engine = Engine("demo")  # its tokens are bytes: 0xC3 then 0xA9 make one character
    state = [""]
    assert engine._text_delta([0xC3], state, 0, last=False) == ""
    assert engine._text_delta([0xC3, 0xA9], state, 0, last=False) == "\u00e9"
    assert engine._text_delta([0xC3, 0xA9, 0xC3], state, 0, last=True) == "\ufffd"  # the end: shown as it is
