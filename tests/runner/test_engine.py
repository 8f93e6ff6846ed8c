"""Engine behaviour: preemption, abort, sampling, stop tokens, sharded
checkpoints and tokenizers."""

from __future__ import annotations

import pytest
import torch

from checkpoints import make_checkpoint
from mixboard.torch_ops.backends import PORTABLE_BACKENDS
from mixboard_runner.engine import Engine
from mixboard_runner.sampling import SamplingParams, sample
from mixboard_runner.sequence import Status


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    directory = tmp_path_factory.mktemp("llama")
    return directory, make_checkpoint("llama", directory)


@pytest.fixture(scope="module")
def engine(llama):
    return Engine(llama[0], cache_memory=16 * 2**20)


def prompts(n=8, seed=3):
    torch.manual_seed(seed)
    return [torch.randint(0, 160, (int(k),)).tolist() for k in torch.randint(5, 30, (n,))]


def test_preemption_recomputes_and_leaves_nothing_allocated(llama, engine):
    # 2 layers x 2 kv heads x 16 dims x (k, v) x 4 bytes = 512 bytes a token: room for 160 tokens
    small = Engine(llama[0], cache_memory=160 * 512)
    params = SamplingParams(max_tokens=8, ignore_eos=True)
    batch = prompts()
    together = small.generate(batch, params)
    assert small.stats.preemptions > 0
    assert [o.output_ids for o in together] == [engine.generate([p], params)[0].output_ids for p in batch]
    assert small.cache.all_free()


def test_abort_frees_blocks_and_slots(engine):
    params = SamplingParams(max_tokens=20, ignore_eos=True)
    seqs = [engine.add(p, params) for p in prompts(4)]
    engine.step()
    engine.step()
    engine.abort(seqs[1])
    waiting = engine.add(prompts(1, seed=9)[0], params)
    engine.abort(waiting)  # aborting a sequence that never ran
    while engine.scheduler.has_work():
        engine.step()
    assert seqs[1].finish_reason == "abort" and waiting.finish_reason == "abort"
    assert [s.finish_reason for s in seqs if s is not seqs[1]] == ["length"] * 3
    assert all(s.status is Status.FINISHED for s in seqs)
    assert engine.cache.all_free()


def test_a_step_with_nothing_to_do_does_nothing(engine):
    assert not engine.scheduler.has_work()
    steps = engine.stats.steps
    assert engine.step() == [] and engine.stats.steps == steps


def test_seeded_sampling_is_reproducible_and_filters_reduce_to_greedy(engine):
    p = prompts(1)[0]
    greedy = engine.generate([p], SamplingParams(max_tokens=8, ignore_eos=True))[0].output_ids
    sampled = [engine.generate([p], SamplingParams(max_tokens=8, temperature=1.0, seed=s, ignore_eos=True))[0].output_ids
               for s in (7, 7, 8)]
    assert sampled[0] == sampled[1] and sampled[0] != sampled[2]
    for params in (SamplingParams(max_tokens=8, temperature=0.7, top_k=1, seed=1, ignore_eos=True),
                   SamplingParams(max_tokens=8, temperature=0.7, top_p=1e-6, seed=1, ignore_eos=True)):
        assert engine.generate([p], params)[0].output_ids == greedy


def test_sampler_top_k_and_top_p_keep_only_the_allowed_tokens():
    logits = torch.tensor([[0.0, 3.0, 2.9, -1.0, 1.0]])
    gen = torch.Generator().manual_seed(0)
    seen_k = {sample(logits, [SamplingParams(temperature=1.0, top_k=2)], [gen])[0] for _ in range(200)}
    assert seen_k == {1, 2}
    probs = torch.softmax(logits[0], -1)  # top two hold ~0.76 of the mass
    seen_p = {sample(logits, [SamplingParams(temperature=1.0, top_p=0.7)], [gen])[0] for _ in range(200)}
    assert seen_p == {1, 2} and probs[1] < 0.7 < probs[1] + probs[2]


def test_stop_tokens_end_a_sequence(engine):
    p = prompts(1, seed=5)[0]
    greedy = engine.generate([p], SamplingParams(max_tokens=10, ignore_eos=True))[0].output_ids
    stop = greedy[3]
    first = greedy.index(stop)
    out = engine.generate([p], SamplingParams(max_tokens=10, stop_token_ids=(stop,)))[0]
    assert out.output_ids == greedy[:first + 1] and out.finish_reason == "stop"


def test_sharded_checkpoint_loads_like_a_single_file(tmp_path, llama):
    _, reference = llama
    reference.save_pretrained(tmp_path, max_shard_size="40KB")
    assert (tmp_path / "model.safetensors.index.json").is_file() and len(list(tmp_path.glob("*.safetensors"))) > 2
    ids = prompts(1)[0]
    sharded, single = Engine(tmp_path, cache_memory=2**20), Engine(llama[0], cache_memory=2**20)
    for (name, a), (_, b) in zip(sharded.model.state_dict().items(), single.model.state_dict().items()):
        assert torch.equal(a, b), name
    # same weights; the GEMMs may round differently with other memory alignment
    torch.testing.assert_close(sharded.score(ids, 3), single.score(ids, 3), atol=1e-5, rtol=0)


def test_text_prompts_through_tokenizer_json(tmp_path, llama):
    from tokenizers import Tokenizer, models, pre_tokenizers

    _, reference = llama
    reference.save_pretrained(tmp_path)
    vocab = {w: i for i, w in enumerate(["<unk>", "hello", "world", "mixers", "of", "hybrid", "models"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    engine = Engine(tmp_path, cache_memory=2**20)
    out = engine.generate(["hello hybrid models"], SamplingParams(max_tokens=3, ignore_eos=True))[0]
    assert out.prompt_ids == [1, 5, 6]
    assert out.text == tok.decode(out.output_ids)


def test_cache_blocks_follow_a_backends_block_multiple(llama, engine):
    from mixboard import Registry, StateSpec, get_registry

    sdpa = get_registry().backends["sdpa"].cls

    class Sdpa48(sdpa):  # the same kernel, asking for blocks of a multiple of 48 tokens
        name = "sdpa48"

        @classmethod
        def state_spec(cls, spec):
            token = (spec.num_kv_heads, spec.head_size)
            return StateSpec.paged(block_multiple=48, k_cache=(token, spec.dtype), v_cache=(token, spec.dtype))

    odd = Engine(llama[0], cache_memory=2**20, registry=Registry.from_backends([Sdpa48, *PORTABLE_BACKENDS]))
    assert odd.cache.block_size == 48  # lcm(16, 48)
    params = SamplingParams(max_tokens=5, ignore_eos=True)
    batch = prompts(3)
    assert [o.output_ids for o in odd.generate(batch, params)] == [o.output_ids for o in engine.generate(batch, params)]
