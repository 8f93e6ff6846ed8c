"""short_conv_torch against the core oracle and transformers' Lfm2ShortConv.

The helpers above the tests are shared with test_shortconv_cuda.py.
"""

from __future__ import annotations

import random

import pytest
import torch
import transformers  # noqa: F401  (first, before any test double of causal_conv1d is importable)
from transformers.models.lfm2.configuration_lfm2 import Lfm2Config
from transformers.models.lfm2.modeling_lfm2 import Lfm2ShortConv

from mixboard import CommonBatchMetadata, ShortConvSpec, ShortConvWeights, simulate
from mixboard.kinds.short_conv import short_conv_state
from mixboard.ops.checks import build_impl
from mixboard.testing import ShortConvOracle, allocate_state
from mixboard_shortconv import ShortConvTorch

CPU = simulate("cpu")
LAYER = "model.layers.3.conv"
SLOTS = 12


# --------------------------------------------------------------------------- helpers


def step_meta(query_lens, context_lens, slots):
    """The common metadata of one step (block tables are irrelevant to short_conv)."""
    return CommonBatchMetadata.build(query_lens, context_lens, slots, [[0]] * len(query_lens), block_size=1 << 16)


def random_weights(spec, seed=0):
    g = torch.Generator().manual_seed(seed)
    dtype = getattr(torch, spec.dtype)
    weight = (torch.randn(spec.hidden_size, spec.conv_width, generator=g) * 0.5).to(dtype)
    bias = (torch.randn(spec.hidden_size, generator=g) * 0.1).to(dtype) if spec.conv_bias else None
    return ShortConvWeights(weight, bias)


def random_inputs(spec, num_tokens, seed):
    g = torch.Generator().manual_seed(seed)
    dtype = getattr(torch, spec.dtype)
    # B, C, x as column slices of one in_proj output, as a layer hands them over
    bcx = torch.randn(num_tokens, 3 * spec.hidden_size, generator=g).to(dtype)
    return bcx.chunk(3, dim=1)


def random_pool(spec, seed):
    pool = allocate_state(short_conv_state(spec), SLOTS)
    g = torch.Generator().manual_seed(seed)
    pool["conv"].copy_(torch.randn(pool["conv"].shape, generator=g))
    return pool


def random_step(rng, num_seqs, max_len=20):
    """Decodes first, then prefills, some continuing from saved state; distinct slots."""
    num_decodes = rng.randint(0, num_seqs)
    query_lens = [1] * num_decodes + [rng.randint(1, max_len) for _ in range(num_seqs - num_decodes)]
    context_lens = [rng.randint(1, 30) for _ in range(num_decodes)]
    # a 1-token prefill with context would be a decode: give those none
    context_lens += [0 if q == 1 or rng.random() < 0.5 else rng.randint(1, 30) for q in query_lens[num_decodes:]]
    return query_lens, context_lens, rng.sample(range(SLOTS), num_seqs)


class Runner:
    """A backend as the runner drives it: one builder call per step, a named impl."""

    def __init__(self, backend, spec, env=CPU):
        self.build = backend.builder(spec, env)
        self.impl = build_impl(backend, spec, env, LAYER)

    def __call__(self, B, C, x, weights, state, common):
        return self.impl.forward(B, C, x, weights, state, self.build(common))


def torch_runner(spec):
    return Runner(ShortConvTorch, spec)


def run_steps(run, spec, weights, steps, seed=0):
    """Feed ``steps`` (query_lens, context_lens, slots) to ``run`` and to the
    oracle from the same starting pool; return both outputs and pools."""
    ours, ref = random_pool(spec, seed), random_pool(spec, seed)
    oracle = ShortConvOracle(spec)
    outs = []
    for i, (q, c, s) in enumerate(steps):
        B, C, x = random_inputs(spec, sum(q), seed * 100 + i)
        meta = step_meta(q, c, s)
        outs.append((run(B, C, x, weights, ours, meta), oracle.forward(B, C, x, weights, ref, meta)))
    return outs, ours["conv"], ref["conv"]


def sequence_in_steps(run, spec, weights, tokens, chunks, slot=5):
    """One sequence's B, C, x (``tokens`` of them) fed as ``chunks`` (lengths) over steps."""
    B, C, x = random_inputs(spec, tokens, seed=7)
    pool = random_pool(spec, seed=1)  # garbage in the slot: a fresh sequence must not see it
    outs, done = [], 0
    for n in chunks:
        sl = slice(done, done + n)
        outs.append(run(B[sl], C[sl], x[sl], weights, pool, step_meta([n], [done], [slot])))
        done += n
    assert done == tokens
    return torch.cat(outs), pool["conv"][slot]


# --------------------------------------------------------------------------- against the oracle


@pytest.mark.parametrize("num_seqs", range(1, 9))
@pytest.mark.parametrize("width, bias", [(3, False), (4, True), (2, False)])
def test_ragged_steps_match_the_oracle(num_seqs, width, bias):
    spec = ShortConvSpec(hidden_size=24, conv_width=width, conv_bias=bias)
    rng = random.Random(num_seqs * 10 + width)
    steps = [random_step(rng, num_seqs) for _ in range(3)]
    steps.append(([1] * num_seqs, [5] * num_seqs, rng.sample(range(SLOTS), num_seqs)))  # decode-only path
    outs, ours, ref = run_steps(torch_runner(spec), spec, random_weights(spec, width), steps, seed=num_seqs)
    for got, want in outs:
        assert (got - want).abs().max() <= 1e-5
    assert (ours - ref).abs().max() <= 1e-6


@pytest.mark.parametrize("dtype, state_dtype, tol", [
    ("bfloat16", None, 3e-2), ("bfloat16", "float32", 3e-2), ("float16", None, 4e-3),
])
def test_low_precision_runs_and_stays_close(dtype, state_dtype, tol):
    spec = ShortConvSpec(hidden_size=32, conv_width=3, dtype=dtype, state_dtype=state_dtype)
    steps = [([9, 4, 1], [0, 3, 0], [0, 4, 2]), ([1, 1, 1], [9, 7, 1], [0, 4, 2]), ([1, 6], [10, 8], [0, 4])]
    outs, ours, ref = run_steps(torch_runner(spec), spec, random_weights(spec), steps)
    for got, want in outs:
        assert got.dtype == getattr(torch, dtype)
        torch.testing.assert_close(got.float(), want.float(), atol=tol, rtol=tol)
    assert ours.dtype == getattr(torch, state_dtype or dtype)
    torch.testing.assert_close(ours.float(), ref.float(), atol=tol, rtol=tol)


# --------------------------------------------------------------------------- steps, chunks, state


def test_prefill_then_decodes_equals_one_long_prefill():
    spec = ShortConvSpec(hidden_size=40, conv_width=3, conv_bias=True)
    weights, run = random_weights(spec), torch_runner(spec)
    long, long_state = sequence_in_steps(run, spec, weights, 17, [17])
    stepped, stepped_state = sequence_in_steps(run, spec, weights, 17, [11] + [1] * 6)
    assert (stepped - long).abs().max() <= 1e-5
    assert (stepped_state - long_state).abs().max() == 0  # the state is the last inputs, copied


@pytest.mark.parametrize("chunks", [[5, 5, 5], [1, 2, 12], [2, 13], [7, 1, 1, 6]])
def test_chunked_prefill_equals_one_prefill(chunks):
    spec = ShortConvSpec(hidden_size=16, conv_width=4)
    weights, run = random_weights(spec), torch_runner(spec)
    whole, whole_state = sequence_in_steps(run, spec, weights, 15, [15])
    chunked, chunked_state = sequence_in_steps(run, spec, weights, 15, chunks)
    assert (chunked - whole).abs().max() <= 1e-5
    assert (chunked_state - whole_state).abs().max() == 0


def test_batched_decodes_equal_one_decode_at_a_time():
    spec = ShortConvSpec(hidden_size=16, conv_width=3)
    weights, run = random_weights(spec), torch_runner(spec)
    B, C, x = random_inputs(spec, 4, seed=3)
    slots, ctx = [7, 2, 9, 0], [4, 1, 8, 30]
    batched_pool, single_pool = random_pool(spec, 2), random_pool(spec, 2)
    batched = run(B, C, x, weights, batched_pool, step_meta([1] * 4, ctx, slots))
    single = torch.cat([run(B[i:i + 1], C[i:i + 1], x[i:i + 1], weights, single_pool, step_meta([1], [ctx[i]], [slots[i]]))
                        for i in range(4)])
    assert torch.equal(batched, single) and torch.equal(batched_pool["conv"], single_pool["conv"])


def test_an_empty_step_is_a_no_op():
    spec = ShortConvSpec(hidden_size=16, conv_width=3)
    pool = random_pool(spec, seed=0)
    before = pool["conv"].clone()
    B, C, x = random_inputs(spec, 0, seed=0)
    assert torch_runner(spec)(B, C, x, random_weights(spec), pool, step_meta([], [], [])).shape == (0, 16)
    assert torch.equal(pool["conv"], before)


def test_state_is_isolated_between_sequences_and_slots():
    spec = ShortConvSpec(hidden_size=16, conv_width=3)
    weights, run = random_weights(spec), torch_runner(spec)
    pool = random_pool(spec, seed=4)
    before = pool["conv"].clone()
    q, c, s = [1, 1, 6, 3], [4, 2, 0, 5], [3, 8, 1, 10]
    B, C, x = random_inputs(spec, sum(q), seed=5)
    together = run(B, C, x, weights, pool, step_meta(q, c, s))
    untouched = [i for i in range(SLOTS) if i not in s]
    assert torch.equal(pool["conv"][untouched], before[untouched])
    # each sequence alone, from the same starting pool, gives the same rows and record
    start = 0
    for qi, ci, si in zip(q, c, s):
        alone_pool = {"conv": before.clone()}
        sl = slice(start, start + qi)
        alone = run(B[sl], C[sl], x[sl], weights, alone_pool, step_meta([qi], [ci], [si]))
        assert (alone - together[sl]).abs().max() <= 1e-6
        assert torch.equal(alone_pool["conv"][si], pool["conv"][si])
        start += qi
    # a fresh sequence ignores what its slot held before (slot 1 was full of noise)
    clean_pool = {"conv": torch.zeros_like(before)}
    fresh = run(B[2:8], C[2:8], x[2:8], weights, clean_pool, step_meta([6], [0], [1]))
    assert (fresh - together[2:8]).abs().max() <= 1e-6


# --------------------------------------------------------------------------- against transformers


def lfm2_module(hidden, width, bias, seed=0):
    config = Lfm2Config(hidden_size=hidden, conv_L_cache=width, conv_bias=bias, num_hidden_layers=1,
                        layer_types=["conv"], num_attention_heads=2, num_key_value_heads=2, vocab_size=32)
    torch.manual_seed(seed)
    module = Lfm2ShortConv(config, layer_idx=0).eval()
    if bias:  # nn.Conv1d's default bias init is small; make it count
        with torch.no_grad():
            module.conv.bias.normal_(0, 0.3)
    return config, module


def our_layer(module, run, spec, hidden_states, pool, common):
    """transformers' projections around our backend, with the module's weights.

    The module computes in_proj(h).transpose(-1, -2).chunk(3, dim=-2): along
    the 3 * hidden features, B, C, x are the first, second and last thirds."""
    bcx = module.in_proj(hidden_states)  # [T, 3 * hidden]
    B, C, x = bcx.chunk(3, dim=-1)
    weights = ShortConvWeights(module.conv.weight.squeeze(1), module.conv.bias)
    return module.out_proj(run(B, C, x, weights, pool, common))


@pytest.mark.parametrize("num_seqs", range(1, 9))
@pytest.mark.parametrize("bias", [False, True])
@torch.no_grad()
def test_matches_lfm2_shortconv_on_ragged_batches(num_seqs, bias):
    hidden, width = 48, 3
    _, module = lfm2_module(hidden, width, bias, seed=num_seqs)
    spec = ShortConvSpec(hidden_size=hidden, conv_width=width, conv_bias=bias)
    rng = random.Random(num_seqs)
    lens = [rng.randint(1, 40) for _ in range(num_seqs)]
    seqs = [torch.randn(n, hidden) for n in lens]
    pool = random_pool(spec, seed=num_seqs)
    got = our_layer(module, torch_runner(spec), spec, torch.cat(seqs), pool,
                    step_meta(lens, [0] * num_seqs, rng.sample(range(SLOTS), num_seqs)))
    want = torch.cat([module(s.unsqueeze(0))[0] for s in seqs])
    assert (got - want).abs().max() <= 1e-5


@torch.no_grad()
def test_matches_lfm2_shortconv_decoding_through_its_cache():
    from transformers.cache_utils import DynamicCache

    hidden, width, prompt, new = 32, 3, 9, 5
    config, module = lfm2_module(hidden, width, bias=True, seed=11)
    spec = ShortConvSpec(hidden_size=hidden, conv_width=width, conv_bias=True)
    run, pool = torch_runner(spec), random_pool(spec, seed=3)
    tokens = torch.randn(2, prompt + new, hidden)  # two sequences, same length, batched in transformers
    cache = DynamicCache(config=config)
    want = [module(tokens[:, :prompt], cache=cache)]
    want += [module(tokens[:, prompt + i: prompt + i + 1], cache=cache) for i in range(new)]
    want = torch.cat(want, dim=1)  # [2, prompt + new, hidden]
    got = [our_layer(module, run, spec, tokens[:, :prompt].reshape(-1, hidden), pool,
                     step_meta([prompt] * 2, [0, 0], [4, 6])).view(2, prompt, hidden)]
    for i in range(new):
        step = tokens[:, prompt + i]
        got.append(our_layer(module, run, spec, step, pool, step_meta([1, 1], [prompt + i] * 2, [4, 6])).unsqueeze(1))
    got = torch.cat(got, dim=1)
    assert (got - want).abs().max() <= 1e-5
    # transformers keeps the last conv_L_cache inputs; our record keeps the last L_cache - 1 of them
    hf_state = cache.layers[0].conv_states[0]
    assert (pool["conv"][[4, 6]] - hf_state[:, :, 1:]).abs().max() <= 1e-6
