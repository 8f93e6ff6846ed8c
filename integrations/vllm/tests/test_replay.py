"""Full CUDA graphs' steps, translated on CPU, where vLLM captures none.

Without an engine: vLLM's own CommonAttentionMetadata, made as its GPU model runner makes it for a
capture run and for padded steps of one-token requests (v1/worker/gpu_model_runner.py: _dummy_run,
_build_attention_metadata, _get_slot_mappings), through the integration's recordings, into
sdpa_cpu (which declares uniform_decode) on the recorded metadata, as a replay would run it. The
reference is the same step unpadded through the eager translation, on a copy of the pools.

In an engine: llama (every layer on sdpa_cpu) with each first step of one-token requests of a
size recorded and every later one run on that recording (MIXBOARD_VLLM_RECORD_FIRST, replay.py),
compiled and eager, one and two ranks: greedy ids equal vLLM alone's in that mode."""

import pytest
import torch
from vllm.v1.attention.backend import AttentionCGSupport, CommonAttentionMetadata

from mixboard import AttentionSpec, Mamba2Spec, get_registry
from mixboard.environment import detect
from mixboard.ops.checks import build_builder, build_impl
from harness import ok, run
from mixboard_vllm import graphs
from mixboard_vllm.attention import MixboardAttentionBuilder
from mixboard_vllm.replay import Recordings, is_uniform

SPEC = AttentionSpec(num_heads=4, num_kv_heads=2, head_size=32)
BS, BLOCKS, WIDTH, CAPTURED = 16, 48, 10, 4  # block size, pool blocks, block-table width, the graph's size
NULL, PAD = 0, -1  # vLLM's padding block (reserved) and slot


def vllm_metadata(seq_lens, query_lens, tables, padded_to, *, capture=False):
    """As vLLM's GPU runner builds a step: requests past the real ones have no tokens, length 0, the
    null block and PAD slots; a capture run's slots are all PAD."""
    n = len(seq_lens)
    qsl = [0]
    for q in query_lens:
        qsl.append(qsl[-1] + q)
    qsl += [qsl[-1]] * (padded_to - n)
    seq = list(seq_lens) + [0] * (padded_to - n)
    table = torch.full((padded_to, WIDTH), NULL, dtype=torch.int32)
    slots = []
    for i, (s, q, row) in enumerate(zip(seq_lens, query_lens, tables)):
        table[i, :len(row)] = torch.tensor(row, dtype=torch.int32)
        slots += [PAD if capture else row[p // BS] * BS + p % BS for p in range(s - q, s)]
    tokens = padded_to if query_lens and max(query_lens) <= 1 else qsl[-1]
    slots += [PAD] * (tokens - len(slots))
    qsl_t = torch.tensor(qsl, dtype=torch.int32)
    seq_t = torch.tensor(seq, dtype=torch.int32)
    return CommonAttentionMetadata(
        query_start_loc=qsl_t, query_start_loc_cpu=qsl_t.clone(), seq_lens=seq_t, num_reqs=padded_to,
        num_actual_tokens=tokens, max_query_len=max(query_lens), max_seq_len=max(seq),
        block_table_tensor=table, slot_mapping=torch.tensor(slots, dtype=torch.int64),
        seq_lens_cpu_upper_bound=seq_t.clone())


@pytest.fixture(scope="module")
def attention():
    backend = get_registry().backends["sdpa_cpu"].cls
    env = detect()
    return backend, build_builder(backend, SPEC, env), build_impl(backend, SPEC, env, "layers.0.attn")


def vllm_builder(builder, recorded=True):
    """The integration's metadata builder for one plan group on sdpa_cpu, made without vLLM's
    constructor (which needs an engine's plan): its build, build_for_cudagraph_capture and
    translate are the ones an engine calls."""
    made = MixboardAttentionBuilder.__new__(MixboardAttentionBuilder)
    made.block_size, made.groups, made.builders = BS, [0], {0: builder}
    made.recordings = Recordings([0], {0: builder}, enabled=recorded)
    return made


def test_a_replayed_step_equals_the_same_step_unpadded(attention):
    backend, builder, impl = attention
    assert backend.capture in ("uniform_decode", "any")  # what makes vLLM capture it
    gen = torch.Generator().manual_seed(7)
    pools = {name: torch.randn(BLOCKS, BS, SPEC.num_kv_heads, SPEC.head_size, generator=gen)
             for name in ("k_cache", "v_cache")}
    vllm = vllm_builder(builder)
    eager = vllm_builder(builder, recorded=False)  # the reference: vLLM told NEVER, every step translated anew

    def rows(T):
        return [torch.randn(T, h, SPEC.head_size, generator=gen) for h in (4, 2, 2)]

    # vLLM's capture run: CAPTURED requests of one token and no context, PAD slots, the null block
    capture = vllm_metadata([1] * CAPTURED, [1] * CAPTURED, [[]] * CAPTURED, CAPTURED, capture=True)
    recorded = vllm.build_for_cudagraph_capture(capture)
    assert recorded.common.num_decodes == CAPTURED and recorded.common.context_lens_cpu.tolist() == [0] * 4
    assert int(recorded.common.slot_mapping.min()) == 0  # PAD written to the null block, never through -1
    before = {n: p.clone() for n, p in pools.items()}
    impl.forward(*rows(CAPTURED), pools, recorded.metas[0])  # what vLLM records
    for n in pools:  # the capture run wrote only into the null block
        assert torch.equal(pools[n][1:], before[n][1:])

    free = list(range(1, BLOCKS))
    for step, lens in enumerate([[37, 5, 90], [130, 2, 17, 64], [33], [80, 3, 1]]):  # 1: a prompt of one token
        perm = torch.randperm(len(free), generator=gen).tolist()  # (vLLM puts fresh prompts last)
        tables, k = [], 0
        for s in lens:
            owned = -(-s // BS)
            tables.append([free[i] for i in perm[k:k + owned]])
            k += owned
        padded = vllm_metadata(lens, [1] * len(lens), tables, CAPTURED)
        assert is_uniform(padded)
        meta = vllm.build(0, padded)
        assert meta is recorded  # refilled, as the graph reads it
        q, kk, v = rows(CAPTURED)
        reference_pools = {n: p.clone() for n, p in pools.items()}
        out = impl.forward(q, kk, v, pools, meta.metas[0]).reshape(CAPTURED, -1)

        R = len(lens)
        fresh = eager.build(0, vllm_metadata(lens, [1] * R, tables, R))
        want = impl.forward(q[:R], kk[:R], v[:R], reference_pools, fresh.metas[0]).reshape(R, -1)
        torch.testing.assert_close(out[:R], want, rtol=1e-6, atol=1e-6, msg=f"step {step}")
        for n in pools:  # the same records written, and padding only into the null block
            assert torch.equal(pools[n][1:], reference_pools[n][1:]), f"step {step}: {n}"


def test_only_steps_of_one_token_rows_and_a_captured_shape_run_on_a_recording(attention):
    _, builder, _ = attention
    vllm = vllm_builder(builder)
    two = vllm_metadata([9, 4], [1, 1], [[3], [5]], 2)
    assert vllm.build(0, two) is not vllm.build(0, two)  # nothing captured yet: each step its own
    recorded = vllm.build_for_cudagraph_capture(vllm_metadata([1, 1], [1, 1], [[], []], 2, capture=True))
    assert vllm.build(0, two) is recorded
    three = vllm_metadata([9, 4, 6], [1, 1, 1], [[3], [5], [6]], 3)
    assert vllm.build(0, three) is not vllm.build(0, three)  # a size vLLM captured no graph of: each step its own
    mixed = vllm_metadata([9, 6], [1, 5], [[3], [5]], 2)
    assert not is_uniform(mixed) and vllm.build(0, mixed) is not recorded
    # two requests of one token in three rows: a piecewise graph's padding, never a full graph's
    ragged = vllm_metadata([9, 4], [1, 1], [[3], [5]], 2)
    ragged.num_actual_tokens = 3
    assert not is_uniform(ragged) and vllm.build(0, ragged) is not recorded
    told_never = vllm_builder(builder, recorded=False)  # vLLM captures nothing: every step translated anew
    first = told_never.build_for_cudagraph_capture(vllm_metadata([1, 1], [1, 1], [[], []], 2, capture=True))
    assert told_never.build(0, two) is not first and told_never.build(0, two).common.num_decodes == 2


def test_vllm_is_told_what_the_planned_backends_allow(monkeypatch):
    registry = get_registry()
    attn = ("model.layers.0.self_attn.attn", "attention", SPEC)
    mamba = ("model.layers.1.mixer", "mamba2", Mamba2Spec(num_heads=8, head_dim=32, d_state=16))
    told = graphs.vllm_support(registry.plan([attn], overrides="attention=sdpa_cpu"))
    assert told is AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE
    both = "attention=sdpa_cpu,mamba2=mamba2_torch"
    assert graphs.vllm_support(registry.plan([attn, mamba], overrides=both)) is AttentionCGSupport.NEVER
    # a slot-state backend that declared uniform_decode: still NEVER (a fresh prompt's record is not reset in a replay)
    monkeypatch.setattr(registry.backends["mamba2_torch"].cls, "capture", "uniform_decode")
    plan = registry.plan([attn, mamba], overrides=both)
    assert graphs.planned_level(plan) == "uniform_decode"
    assert graphs.vllm_support(plan) is AttentionCGSupport.NEVER


RECORD = {"MIXBOARD_VLLM_RECORD_FIRST": "1"}
ENGINES = [({"enforce_eager": False}, {}), ({}, {}),
           ({"enforce_eager": False, "tensor_parallel_size": 2}, {"VLLM_CPU_OMP_THREADS_BIND": "0|1"})]


@pytest.mark.parametrize("extra, env", ENGINES, ids=["compiled", "eager", "compiled-tp2"])
def test_llama_runs_on_recorded_steps_in_an_engine(extra, env, workdir, checkpoint, native):
    tag = "llama_recorded" + "".join(f"_{k}={v}" for k, v in sorted(extra.items()))
    r = ok(run(workdir, tag, checkpoint("llama"), {**RECORD, **env}, extra))
    ranks = extra.get("tensor_parallel_size", 1)
    assert r.log.count("vLLM is told UNIFORM_SINGLE_TOKEN_DECODE, though this configuration captures no graphs "
                       "(cudagraph_mode NONE)") == ranks  # vLLM's CPU build: the log says so
    uniform = [s for s in r.steps if s.endswith(" uniform")]
    assert len(uniform) > 20 and any("seqs=3" in s for s in uniform)  # steps of 1, 2 and 3 run on recordings
    assert r.ids == native("llama", {k: v for k, v in extra.items() if k == "enforce_eager"})
