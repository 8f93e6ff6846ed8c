"""mamba2_torch against the core oracle and against transformers' Mamba2Mixer.

transformers' module is run as is; ours is the module's in_proj -> our
backend -> the module's out_proj, with the module's weights. float32 must
agree to 1e-5 (max abs) on ragged batches of 1 to 8 sequences.
"""

from __future__ import annotations

import dataclasses
import math
import random
import sys
from pathlib import Path

import pytest
import torch
from transformers import Mamba2Config
from transformers.models.mamba2.modeling_mamba2 import Mamba2Mixer

from mixboard import Mamba2Spec, Mamba2Weights
from mixboard.ops.checks import BackendInputError
from mixboard_mamba2.torch_backend import Mamba2Torch

sys.path.insert(0, str(Path(__file__).parent / "doubles" / "mamba2"))
from mamba2_cases import (  # noqa: E402
    LAYER, Inputs, OracleRunner, Runner, fresh_state, meta_for, random_inputs, random_weights, small_spec,
)

F32 = dict(atol=1e-5, rtol=0)


def assert_close(actual, expected, **tol):
    torch.testing.assert_close(actual, expected, **(tol or F32))


def assert_matches_oracle_from_saved_states(spec, weights, inputs, query, context, slots):
    """Both pools start from the same random saved states (to continue from, and
    leftovers fresh sequences must ignore); outputs and every record, written or
    untouched, must agree with the oracle's."""
    ours, theirs = fresh_state(spec, 12), fresh_state(spec, 12)
    for name, pool in ours.items():
        pool.normal_()
        theirs[name].copy_(pool)
    out = Runner(Mamba2Torch, spec, weights)(inputs, ours, query, context, slots)
    assert_close(out, OracleRunner(spec, weights)(inputs, theirs, query, context, slots))
    for name in ours:
        assert_close(ours[name], theirs[name])


# --------------------------------------------------------------------------- against the oracle


def ragged_batch(rng: random.Random, n: int):
    """n sequences, decodes first: (query_lens, context_lens, slots)."""
    num_decodes = rng.randint(0, n)
    query = [1] * num_decodes + [rng.randint(1, 30) for _ in range(n - num_decodes)]
    # a one-token prefill with context would be a decode: give those context 0
    context = [rng.randint(1, 40) for _ in range(num_decodes)]
    context += [0 if q == 1 else rng.choice([0, 0, rng.randint(1, 40)]) for q in query[num_decodes:]]
    slots = rng.sample(range(12), n)
    return query, context, slots


@pytest.mark.parametrize("n_groups", [1, 2])
@pytest.mark.parametrize("chunk_size", [4, 16, 256])
def test_ragged_batches_match_the_oracle_outputs_and_states(n_groups, chunk_size):
    spec = small_spec(n_groups=n_groups, chunk_size=chunk_size)
    weights = random_weights(spec, seed=n_groups)
    rng = random.Random(chunk_size)
    for n in range(1, 9):
        query, context, slots = ragged_batch(rng, n)
        inputs = random_inputs(spec, sum(query), seed=n)
        assert_matches_oracle_from_saved_states(spec, weights, inputs, query, context, slots)


@pytest.mark.parametrize("n_groups", [1, 2])
@pytest.mark.parametrize("budget", [64 << 20, 1])  # one batched scan for equal lengths; one per sequence
def test_prefills_of_one_length_batched_match_the_oracle(monkeypatch, n_groups, budget):
    """Consecutive prefills of one length are scanned together (as one
    sequence with n x heads), fresh and continuing ones mixed."""
    from mixboard_mamba2 import ssd

    monkeypatch.setattr(ssd, "PREFILL_BATCH_BYTES", budget)
    spec = small_spec(n_groups=n_groups, chunk_size=8)
    weights = random_weights(spec, seed=3)
    query, context, slots = [1, 1, 12, 12, 12, 5, 12, 12], [4, 9, 0, 7, 0, 0, 3, 0], [5, 1, 0, 7, 3, 9, 2, 11]
    inputs = random_inputs(spec, sum(query), seed=4)
    assert_matches_oracle_from_saved_states(spec, weights, inputs, query, context, slots)


def test_strong_decays_over_long_chunks_stay_exact():
    """Large per-token decays summed over a 256-token chunk: the segment sums must not lose precision."""
    spec = small_spec(n_groups=1, chunk_size=256)
    weights = random_weights(spec, seed=3)
    weights = weights.replace(A=weights.A * 8)
    inputs = random_inputs(spec, 300, seed=3)
    ours, theirs = fresh_state(spec, 2), fresh_state(spec, 2)
    out = Runner(Mamba2Torch, spec, weights)(inputs, ours, [300], [0], [1])
    assert_close(out, OracleRunner(spec, weights)(inputs, theirs, [300], [0], [1]))
    assert_close(ours["ssm"], theirs["ssm"])


def test_dt_limits_are_applied():
    spec = small_spec(dt_min=0.3, dt_max=0.9)
    weights = random_weights(spec, seed=4)
    query, context, slots = [1, 1, 12, 7], [5, 3, 0, 9], [0, 1, 2, 3]
    inputs = random_inputs(spec, sum(query), seed=4)
    ours, theirs = fresh_state(spec, 4, fill=0.5), fresh_state(spec, 4, fill=0.5)
    out = Runner(Mamba2Torch, spec, weights)(inputs, ours, query, context, slots)
    assert_close(out, OracleRunner(spec, weights)(inputs, theirs, query, context, slots))
    unlimited = Runner(Mamba2Torch, small_spec(), weights)(inputs, fresh_state(spec, 4, fill=0.5), query, context,
                                                           slots)
    assert (out - unlimited).abs().max() > 1e-2  # the limits changed something


@pytest.mark.parametrize("budget", ["one record", "three records", "default"])
def test_decode_batches_in_place_and_gathered_match_the_oracle(monkeypatch, budget):
    """Decodes go in cache-sized batches; a batch of one float32 record is updated in place in the pool."""
    from mixboard_mamba2 import ssd

    spec = small_spec(n_groups=2)
    record = spec.num_heads * spec.head_dim * spec.d_state * 4
    if budget != "default":
        monkeypatch.setattr(ssd, "DECODE_STATE_BYTES", record * (1 if budget == "one record" else 3))
    weights = random_weights(spec, seed=11)
    query, context, slots = [1] * 7 + [6], [4, 9, 1, 2, 30, 5, 8, 0], [9, 2, 6, 0, 11, 4, 7, 3]
    inputs = random_inputs(spec, sum(query), seed=11)
    assert_matches_oracle_from_saved_states(spec, weights, inputs, query, context, slots)


# --------------------------------------------------------------------------- without the gated norm


def ungated(spec: Mamba2Spec, weights: Mamba2Weights, inputs: Inputs):
    """The layer with gated_norm=False, as an engine that norms across ranks hands it over: no
    norm_weight, and a gate the backend must not read (NaN here, so that reading it shows)."""
    spec = dataclasses.replace(spec, gated_norm=False)
    return spec, weights.replace(norm_weight=None), Inputs(torch.full_like(inputs.z, math.nan), inputs.xBC, inputs.dt)


@pytest.mark.parametrize("n_groups", [1, 2])
def test_without_the_gated_norm_ragged_batches_match_the_oracle(n_groups):
    """y = S @ C + D * x, before the gate and the norm: decodes, fresh and continuing prefills."""
    spec = small_spec(n_groups=n_groups, chunk_size=8)
    rng = random.Random(n_groups)
    for n in (1, 4, 8):
        query, context, slots = ragged_batch(rng, n)
        spec_, weights, inputs = ungated(spec, random_weights(spec, seed=n), random_inputs(spec, sum(query), seed=n))
        assert_matches_oracle_from_saved_states(spec_, weights, inputs, query, context, slots)


def test_without_the_gated_norm_decodes_only_match_the_oracle():
    spec, weights, inputs = ungated(small_spec(), random_weights(small_spec(), seed=12),
                                    random_inputs(small_spec(), 3, seed=12))
    assert_matches_oracle_from_saved_states(spec, weights, inputs, [1, 1, 1], [4, 9, 2], [5, 1, 11])


# --------------------------------------------------------------------------- against transformers


def hf_mixer(n_groups: int, chunk_size: int, seed: int = 0) -> Mamba2Mixer:
    config = Mamba2Config(hidden_size=32, expand=2, num_heads=8, head_dim=8, state_size=16, n_groups=n_groups,
                          conv_kernel=4, chunk_size=chunk_size, num_hidden_layers=1, vocab_size=16,
                          layer_norm_epsilon=1e-5)
    torch.manual_seed(seed)
    mixer = Mamba2Mixer(config, layer_idx=0).eval()
    with torch.no_grad():  # move every weight off its init so that each one matters
        mixer.A_log.copy_(torch.log(torch.rand(8) * 2 + 0.1))
        mixer.dt_bias.copy_(torch.randn(8) * 0.5)
        mixer.D.copy_(torch.randn(8))
        mixer.norm.weight.copy_(torch.rand(64) + 0.5)
        mixer.conv1d.bias.copy_(torch.randn(mixer.conv_dim) * 0.1)
    # transformers 5 has no gated-MLP part in Mamba2Mixer (d_mlp == 0): in_proj is exactly z | xBC | dt.
    assert mixer.in_proj.out_features == mixer.intermediate_size + mixer.conv_dim + mixer.num_heads
    return mixer


def spec_of(m: Mamba2Mixer) -> Mamba2Spec:
    return Mamba2Spec(num_heads=m.num_heads, head_dim=m.head_dim, d_state=m.ssm_state_size, n_groups=m.n_groups,
                      d_conv=m.conv_kernel_size, chunk_size=m.chunk_size, conv_bias=m.use_conv_bias,
                      norm_eps=m.norm.variance_epsilon, dt_min=m.time_step_limit[0], dt_max=m.time_step_limit[1])


def weights_of(m: Mamba2Mixer) -> Mamba2Weights:
    return Mamba2Weights(conv_weight=m.conv1d.weight[:, 0], conv_bias=m.conv1d.bias, dt_bias=m.dt_bias,
                         A=-torch.exp(m.A_log.float()), D=m.D, norm_weight=m.norm.weight)


class Ours:
    """transformers' projections around mamba2_torch. ``gated_norm=False``: the backend stops before the
    gate and the norm, and transformers' own norm module (Mamba2RMSNormGated) applies them, as an engine
    that owns the norm does."""

    def __init__(self, m: Mamba2Mixer, gated_norm: bool = True):
        spec, weights = spec_of(m), weights_of(m)
        if not gated_norm:
            spec, weights = dataclasses.replace(spec, gated_norm=False), weights.replace(norm_weight=None)
        self.m, self.gated_norm, self.run = m, gated_norm, Runner(Mamba2Torch, spec, weights)
        self.state = fresh_state(self.run.spec, 10, fill=3.0)  # leftovers: fresh sequences must ignore them

    def __call__(self, hidden, query, context, slots):
        m = self.m
        z, xBC, dt = m.in_proj(hidden).split([m.intermediate_size, m.conv_dim, m.num_heads], dim=-1)
        y = self.run(Inputs(z, xBC, dt), self.state, query, context, slots)
        return m.out_proj(y if self.gated_norm else m.norm(y, z))


@pytest.mark.parametrize("n_groups", [1, 2])
@pytest.mark.parametrize("chunk_size, lengths", [
    (8, [13]), (8, [1, 24, 8]), (8, [5, 40, 1, 17, 9, 3, 33, 16]),
    (64, [150, 64, 37]),  # chunks of whole 16-token blocks (the blocked decay), a partial last chunk
])
@torch.no_grad()
def test_fresh_ragged_prefills_match_transformers_mamba2_mixer(n_groups, chunk_size, lengths):
    """One-token sequences, exact multiples, several chunks and partial last chunks."""
    m = hf_mixer(n_groups, chunk_size=chunk_size, seed=len(lengths))
    torch.manual_seed(1)
    sequences = [torch.randn(n, 32) for n in lengths]
    out = Ours(m)(torch.cat(sequences), lengths, [0] * len(lengths), list(range(len(lengths)))[::-1])
    for seq, got in zip(sequences, out.split(lengths)):
        assert_close(got, m(seq[None])[0])


@pytest.mark.parametrize("n_groups", [1, 2])
@torch.no_grad()
def test_prefill_then_decodes_equals_one_long_prefill_and_transformers(n_groups):
    m = hf_mixer(n_groups, chunk_size=8, seed=5)
    prompts, steps = [11, 6, 20], 5
    torch.manual_seed(2)
    full = [torch.randn(p + steps, 32) for p in prompts]
    slots = [7, 2, 4]

    ours = Ours(m)
    pieces = [ours(torch.cat([f[:p] for f, p in zip(full, prompts)]), prompts, [0, 0, 0], slots).split(prompts)]
    for k in range(steps):  # all three decode together, one token each
        tokens = torch.stack([f[p + k] for f, p in zip(full, prompts)])
        pieces.append(ours(tokens, [1, 1, 1], [p + k for p in prompts], slots).split(1))
    stepped = [torch.cat([piece[i] for piece in pieces]) for i in range(3)]

    long = Ours(m)(torch.cat(full), [p + steps for p in prompts], [0, 0, 0], [0, 1, 2]).split(
        [p + steps for p in prompts])
    for i in range(3):
        assert_close(stepped[i], long[i])
        assert_close(stepped[i], m(full[i][None])[0])


@pytest.mark.parametrize("n_groups", [1, 2])
@torch.no_grad()
def test_without_the_gated_norm_transformers_norm_after_it_gives_transformers_mixer(n_groups):
    """Prefills, then decodes, with the gate and the norm applied by the caller."""
    m = hf_mixer(n_groups, chunk_size=8, seed=7)
    prompts = [13, 1, 20]
    torch.manual_seed(4)
    full = [torch.randn(p + 3, 32) for p in prompts]
    ours = Ours(m, gated_norm=False)
    pieces = [ours(torch.cat([f[:p] for f, p in zip(full, prompts)]), prompts, [0, 0, 0], [4, 0, 2]).split(prompts)]
    for k in range(3):
        tokens = torch.stack([f[p + k] for f, p in zip(full, prompts)])
        pieces.append(ours(tokens, [1, 1, 1], [p + k for p in prompts], [4, 0, 2]).split(1))
    for i in range(3):
        assert_close(torch.cat([piece[i] for piece in pieces]), m(full[i][None])[0])


@torch.no_grad()
def test_chunked_prefill_equals_one_prefill_beside_other_sequences():
    m = hf_mixer(2, chunk_size=8, seed=6)
    torch.manual_seed(3)
    long_seq, other = torch.randn(37, 32), torch.randn(9, 32)
    ours = Ours(m)
    ours(other[:5], [5], [0], [1])
    outs, done = [], 0
    for k, piece in enumerate([10, 16, 11]):
        # another sequence decodes in the same steps (decodes first)
        step = ours(torch.cat([other[5 + k][None], long_seq[done:done + piece]]), [1, piece], [5 + k, done], [1, 6])
        outs.append(step[1:])
        done += piece
    assert_close(torch.cat(outs), Ours(m)(long_seq, [37], [0], [0]))
    assert_close(torch.cat(outs), m(long_seq[None])[0])


# --------------------------------------------------------------------------- state handling


def test_sequences_are_isolated_and_untouched_slots_are_kept():
    spec = small_spec()
    weights = random_weights(spec, seed=7)
    query, context, slots = [1, 9, 4], [6, 0, 3], [3, 0, 5]
    inputs = random_inputs(spec, sum(query), seed=7)
    state = fresh_state(spec, 8)
    for pool in state.values():
        pool.normal_()
    before = {k: v.clone() for k, v in state.items()}
    together = Runner(Mamba2Torch, spec, weights)(inputs, state, query, context, slots)
    for pool_name, pool in state.items():
        untouched = [s for s in range(8) if s not in slots]
        assert torch.equal(pool[untouched], before[pool_name][untouched])
    starts = [0, 1, 10, 14]
    for i in range(3):  # each sequence alone, from the same saved state, gives the same output
        alone_state = {k: v.clone() for k, v in before.items()}
        alone = Runner(Mamba2Torch, spec, weights)(inputs.rows(starts[i], starts[i + 1]), alone_state, [query[i]],
                                                   [context[i]], [slots[i]])
        assert_close(alone, together[starts[i]:starts[i + 1]])


def test_a_fresh_sequence_ignores_what_its_slot_held():
    spec = small_spec()
    weights = random_weights(spec, seed=8)
    inputs = random_inputs(spec, 12, seed=8)
    clean = Runner(Mamba2Torch, spec, weights)(inputs, fresh_state(spec, 2), [12], [0], [1])
    dirty = Runner(Mamba2Torch, spec, weights)(inputs, fresh_state(spec, 2, fill=5.0), [12], [0], [1])
    assert torch.equal(clean, dirty)


def test_the_common_metadata_is_accepted_as_meta():
    spec = small_spec()
    weights = random_weights(spec, seed=9)
    inputs = random_inputs(spec, 7, seed=9)
    run = Runner(Mamba2Torch, spec, weights)
    built = run(inputs, fresh_state(spec, 2), [7], [0], [1])
    direct = run.impl.forward(inputs.z, inputs.xBC, inputs.dt, weights, fresh_state(spec, 2), meta_for([7], [0], [1]))
    assert torch.equal(built, direct)


# --------------------------------------------------------------------------- dtypes


@pytest.mark.parametrize("dtype, state_dtype", [("bfloat16", None), ("float16", None), ("bfloat16", "float32")])
def test_half_precision_runs_close_to_the_oracle(dtype, state_dtype):
    spec = small_spec(dtype=dtype, state_dtype=state_dtype)
    tdtype = getattr(torch, dtype)
    weights = random_weights(spec, seed=10, dtype=tdtype)
    ours, theirs = fresh_state(spec, 4), fresh_state(spec, 4)
    run, oracle = Runner(Mamba2Torch, spec, weights), OracleRunner(spec, weights)
    for query, context in (([9, 14], [0, 0]), ([1, 1], [9, 14]), ([1, 5], [10, 15])):
        inputs = random_inputs(spec, sum(query), seed=sum(context), dtype=tdtype)
        out = run(inputs, ours, query, context, [1, 3])
        assert out.dtype == tdtype and ours["ssm"].dtype == getattr(torch, state_dtype or dtype)
        expected = oracle(inputs, theirs, query, context, [1, 3])
        torch.testing.assert_close(out.float(), expected.float(), atol=0.1, rtol=0.05)


# --------------------------------------------------------------------------- bad inputs


def _bad_cases(spec: Mamba2Spec):
    T = 5
    good = random_inputs(spec, T)
    weights = random_weights(spec)
    state = fresh_state(spec, 4)

    def case(z=good.z, xBC=good.xBC, dt=good.dt, w=weights, st=state, slots=(0, 1)):
        return z, xBC, dt, w, st, slots

    return {
        "xBC shape": (case(xBC=good.xBC[:, :-1]),
                      rf"xBC must have shape \[5, {spec.conv_dim}\], got \[5, {spec.conv_dim - 1}\]"),
        "z dtype": (case(z=good.z.double()), "z must be torch.float32, got torch.float64"),
        "dt device": (case(dt=good.dt.to("meta")), "dt must be on cpu, got meta"),
        "too few tokens": (case(z=good.z[:4], xBC=good.xBC[:4], dt=good.dt[:4]), r"xBC must have shape \[5, "),
        "missing pool": (case(st={"conv": state["conv"]}), "state is missing ssm"),
        "pool shape": (case(st={**state, "ssm": state["ssm"][:, :, :, :-1]}), r"state\['ssm'\] must have shape"),
        # records may sit apart in larger pages, but each must be contiguous
        "pool record layout": (case(st={**state, "ssm": state["ssm"].transpose(2, 3).contiguous().transpose(2, 3)}),
                               r"state\['ssm'\] must be \[num_records, 4, 8, 16\] with each record contiguous"),
        "slot out of range": (case(slots=(0, 4)), r"state slot \[0, 4\] out of range: the pool has 4 slots"),
        "shared slot": (case(slots=(2, 2)), "state slot 2 is given to more than one sequence"),
        "weight shape": (case(w=weights.replace(D=weights.D[:-1])),
                         r"weights.D must have shape \[4\], got \[3\]"),
        "conv bias missing": (case(w=weights.replace(conv_bias=None)),
                              "conv_bias=True but weights.conv_bias is None"),
        "norm weight missing": (case(w=weights.replace(norm_weight=None)),
                                "the spec has gated_norm=True but weights.norm_weight is None"),
    }


@pytest.mark.parametrize("name", list(_bad_cases(small_spec())))
def test_bad_inputs_raise_errors_that_name_the_layer(name):
    spec = small_spec()
    (z, xBC, dt, weights, state, slots), message = _bad_cases(spec)[name]
    run = Runner(Mamba2Torch, spec, weights)
    meta = run.build(meta_for([2, 3], [0, 0], slots))
    with pytest.raises(BackendInputError, match=message) as info:
        run.impl.forward(z, xBC, dt, weights, state, meta)
    assert str(info.value).startswith(f"{LAYER}: ")


def test_meta_of_another_kind_is_refused_with_the_layer_name():
    spec = small_spec()
    inputs, weights = random_inputs(spec, 3), random_weights(spec)
    run = Runner(Mamba2Torch, spec, weights)
    with pytest.raises(BackendInputError, match=f"{LAYER}: meta must be what this backend's builder returns"):
        run.impl.forward(inputs.z, inputs.xBC, inputs.dt, weights, fresh_state(spec), {"num_tokens": 3})
    other = Runner(Mamba2Torch, small_spec(d_conv=3), random_weights(small_spec(d_conv=3)))
    with pytest.raises(BackendInputError, match="planned for conv width 3, the layer's is 4"):
        run.impl.forward(inputs.z, inputs.xBC, inputs.dt, weights, fresh_state(spec),
                         other.build(meta_for([3], [0], [0])))


# --------------------------------------------------------------------------- records apart in larger pages


@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("slot_range", [(1, 4), None])
def test_the_decode_update_on_records_apart_equals_it_on_a_contiguous_pool(groups, slot_range):
    """One group: consecutive records are updated in place in their pages; several: gathered and scattered (a
    slice of records apart cannot fold sequences into groups). Either way nothing between records is written."""
    from mixboard_mamba2.ssd import ssd_decode

    torch.manual_seed(groups)
    n, H, P, N, S = 3, 4, 8, 16, 6
    record = H * P * N
    buffer = torch.full((S, record + 40), -7.0)
    pool = buffer[:, 24:24 + record].view(S, H, P, N)
    pool.copy_(torch.randn(S, H, P, N))
    flat = pool.clone()
    slots = torch.tensor([1, 2, 3])
    x, dt = torch.randn(n, H, P), torch.rand(n, H)
    A, B, C = -torch.rand(H), torch.randn(n, groups, N), torch.randn(n, groups, N)
    got = ssd_decode(pool, slots, slot_range, x, dt, A, B, C)
    want = ssd_decode(flat, slots, slot_range, x, dt, A, B, C)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(pool, flat)
    assert bool((buffer[:, :24] == -7.0).all() and (buffer[:, 24 + record:] == -7.0).all())
