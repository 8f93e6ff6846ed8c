"""mamba1_torch against the core oracle: ragged batches, state carried across
steps, chunked prefills, numerics at extreme decays, bad inputs, low precision."""

from __future__ import annotations

import random

import pytest
import torch

from mixboard import CommonBatchMetadata, Mamba1Spec, Mamba1Weights, Registry, simulate
from mixboard.dtypes import dtype_name
from mixboard.ops.checks import BackendInputError, build_impl
from mixboard.testing import Mamba1Oracle, allocate_state
from mixboard_mamba1 import scan, torch_impl
from mixboard_mamba1.torch_backend import Mamba1Torch

CPU = simulate("cpu")
SPEC = Mamba1Spec(d_inner=24, d_state=5, d_conv=4, dt_rank=3)
LAYER = "model.layers.7.mixer"
SLOTS = 10


def random_weights(spec: Mamba1Spec, seed: int = 0, dtype=torch.float32) -> Mamba1Weights:
    """Weights whose dt spans slow and fast channels and whose A spans weak and strong decay."""
    g = torch.Generator().manual_seed(seed)
    DI, N, R, W = spec.d_inner, spec.d_state, spec.dt_rank, spec.d_conv

    def r(*shape, scale=1.0, shift=0.0):
        return (torch.randn(*shape, generator=g) * scale + shift).to(dtype)

    return Mamba1Weights(
        conv_weight=r(DI, W, scale=0.5), conv_bias=r(DI, scale=0.2) if spec.conv_bias else None,
        x_proj_weight=r(R + 2 * N, DI, scale=0.3), dt_proj_weight=r(DI, R, scale=0.5),
        dt_proj_bias=r(DI, scale=1.5, shift=-2.0),
        A=(-torch.exp(torch.randn(DI, N, generator=g) * 1.5)).to(dtype), D=r(DI),
    )


def pools(spec: Mamba1Spec, seed: int = 1) -> dict[str, torch.Tensor]:
    """Pools full of noise, so that a fresh sequence reading its slot would show."""
    from mixboard.kinds.mamba1 import mamba1_state

    g = torch.Generator().manual_seed(seed)
    state = allocate_state(mamba1_state(spec), SLOTS)
    for t in state.values():
        t.copy_(torch.randn(t.shape, generator=g))
    return state


def clone(state):
    return {k: v.clone() for k, v in state.items()}


def impl(spec=SPEC):
    return build_impl(Mamba1Torch, spec, CPU, LAYER)


def inputs(meta, spec=SPEC, seed=2, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(meta.num_tokens, spec.d_inner, generator=g).to(dtype)
    z = torch.randn(meta.num_tokens, spec.d_inner, generator=g).to(dtype)
    return x, z


def step(query_lens, context_lens, slots):
    return CommonBatchMetadata.build(query_lens, context_lens, slots, [[] for _ in slots], block_size=16)


BATCHES = [
    ([5], [0], [3]),  # one fresh prefill
    ([1], [9], [4]),  # one decode
    ([1, 1, 1, 1, 1, 1, 1, 1], [3, 1, 8, 20, 2, 5, 7, 1], [9, 0, 1, 2, 3, 4, 5, 6]),  # eight decodes
    ([1, 1, 7, 33, 2], [4, 12, 0, 5, 0], [2, 8, 0, 5, 9]),  # decodes, fresh and continuing prefills
    ([1, 1, 1, 5], [3, 4, 5, 0], [4, 5, 6, 0]),  # decodes in consecutive slots: updated in place
    ([1, 1, 1, 1], [3, 4, 5, 6], [6, 7, 8, 9]),
    ([70, 1, 64, 3, 2, 9, 11, 1], [0, 0, 3, 0, 1, 0, 40, 0], [1, 2, 3, 4, 5, 6, 7, 8]),  # eight prefills
]


@pytest.mark.parametrize("query_lens, context_lens, slots", BATCHES)
def test_matches_the_oracle_on_ragged_batches_and_touches_only_its_slots(query_lens, context_lens, slots):
    meta = step(query_lens, context_lens, slots)
    weights, state = random_weights(SPEC), pools(SPEC)
    x, z = inputs(meta)
    expected_state = clone(state)
    expected = Mamba1Oracle(SPEC).forward(x, z, weights, expected_state, meta)
    got = impl().forward(x, z, weights, state, Mamba1Torch.builder(SPEC, CPU)(meta))
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    for name in state:  # the sequences' slots hold the oracle's states; every other slot is untouched
        torch.testing.assert_close(state[name], expected_state[name], atol=1e-5, rtol=0)
    untouched = [s for s in range(SLOTS) if s not in slots]
    before = pools(SPEC)
    for name in state:
        assert torch.equal(state[name][untouched], before[name][untouched])


def run_steps(steps, seqs_tokens, weights, spec=SPEC):
    """Run ``steps`` (lists of (sequence, n new tokens)) through mamba1_torch; returns each sequence's outputs."""
    backend, builder = impl(spec), Mamba1Torch.builder(spec, CPU)
    state = pools(spec)
    done = {s: 0 for s in seqs_tokens}
    outs = {s: [] for s in seqs_tokens}
    for plan in steps:
        plan = sorted(plan, key=lambda p: not (p[1] == 1 and done[p[0]] > 0))  # decodes first
        meta = step([n for _, n in plan], [done[s] for s, _ in plan], [s for s, _ in plan])
        x = torch.cat([seqs_tokens[s][0][done[s]:done[s] + n] for s, n in plan])
        z = torch.cat([seqs_tokens[s][1][done[s]:done[s] + n] for s, n in plan])
        y = backend.forward(x, z, weights, state, builder(meta))
        start = 0
        for s, n in plan:
            outs[s].append(y[start:start + n])
            done[s] += n
            start += n
    return {s: torch.cat(o) for s, o in outs.items()}, state


def sequences(lengths, seed=5, spec=SPEC):
    g = torch.Generator().manual_seed(seed)
    return {i: (torch.randn(n, spec.d_inner, generator=g), torch.randn(n, spec.d_inner, generator=g))
            for i, n in enumerate(lengths)}


def test_prefill_then_decodes_equals_one_long_prefill():
    seqs, weights = sequences([30, 24, 41]), random_weights(SPEC, 3)
    whole, whole_state = run_steps([[(0, 30), (1, 24), (2, 41)]], seqs, weights)
    steps = [[(0, 20), (1, 18), (2, 35)]] + [[(0, 1), (1, 1), (2, 1)] for _ in range(6)] + [[(0, 1)]] * 4
    incremental, state = run_steps(steps, seqs, weights)
    for s in seqs:
        torch.testing.assert_close(incremental[s], whole[s], atol=1e-5, rtol=0)
    for name in state:
        torch.testing.assert_close(state[name][:3], whole_state[name][:3], atol=1e-5, rtol=0)


def test_a_prefill_split_into_chunks_equals_one_prefill(monkeypatch):
    monkeypatch.setattr(scan, "BLOCK_ELEMENTS", 40 * SPEC.d_inner * SPEC.d_state)  # several blocks per chunk
    seqs, weights = sequences([300, 150]), random_weights(SPEC, 4)
    whole, whole_state = run_steps([[(0, 300), (1, 150)]], seqs, weights)
    chunked, state = run_steps([[(0, 100), (1, 1)], [(0, 77), (1, 99)], [(0, 123), (1, 50)]], seqs, weights)
    for s in seqs:
        torch.testing.assert_close(chunked[s], whole[s], atol=1e-5, rtol=0)
    for name in state:
        torch.testing.assert_close(state[name][:2], whole_state[name][:2], atol=1e-5, rtol=0)


def naive_scan(u, dt, A, B, C, h):
    h = h.double()
    ys = []
    for t in range(u.shape[0]):
        h = torch.exp(dt[t, :, None].double() * A.double()) * h + (dt[t] * u[t]).double()[:, None] * B[t].double()
        ys.append(h @ C[t].double())
    return torch.stack(ys), h


@pytest.mark.parametrize("length", [1, 2, 31, 997])
def test_chunked_scan_is_the_recurrence_even_at_extreme_decays(length):
    torch.manual_seed(length)
    D, N = 6, 4
    u, B, C = torch.randn(length, D), torch.randn(length, N), torch.randn(length, N)
    dt = torch.rand(length, D) * 0.05
    dt[:, 0] = 30.0  # exp(dt * A) underflows to 0 on every step
    dt[::7, 1] = 500.0  # an occasional full reset
    A = -torch.rand(D, N) * 20
    A[2] = -1e-4  # almost no decay: the state integrates the whole sequence
    h0 = torch.randn(D, N)
    y = torch.empty(length, D)
    h = scan.selective_scan(u, dt, A, B, C, h0, out=y)
    y_ref, h_ref = naive_scan(u, dt, A, B, C, h0)
    assert torch.isfinite(y).all() and torch.isfinite(h).all()
    scale = max(1.0, y_ref.abs().max().item())
    torch.testing.assert_close(y.double(), y_ref, atol=2e-6 * scale, rtol=0)
    torch.testing.assert_close(h.double(), h_ref, atol=2e-6 * scale, rtol=0)


class CountingTorch:
    """Stands in for the torch module inside scan.py and counts calls to its functions."""

    def __init__(self):
        self.calls = 0

    def __getattr__(self, name):
        attr = getattr(torch, name)
        if not callable(attr) or isinstance(attr, type):
            return attr

        def counted(*args, **kwargs):
            self.calls += 1
            return attr(*args, **kwargs)
        return counted


def test_a_long_prefill_is_not_one_python_step_per_token(monkeypatch):
    counter = CountingTorch()
    monkeypatch.setattr(scan, "torch", counter)
    length = 1024
    u, dt = torch.randn(length, 8), torch.rand(length, 8)
    scan.selective_scan(u, dt, -torch.rand(8, 4), torch.randn(length, 4), torch.randn(length, 4), torch.zeros(8, 4),
                        out=torch.empty(length, 8))
    assert 0 < counter.calls < length / 4, counter.calls


def test_a_batch_of_decodes_takes_the_step_path(monkeypatch):
    def no_conv_over_a_sequence(*args, **kwargs):
        raise AssertionError("an all-decode batch ran the ragged conv")

    monkeypatch.setattr(torch_impl, "causal_conv1d", no_conv_over_a_sequence)
    monkeypatch.setattr(torch_impl, "selective_scan", no_conv_over_a_sequence)
    meta = step([1, 1, 1], [4, 9, 2], [3, 0, 7])
    weights, state = random_weights(SPEC), pools(SPEC)
    x, z = inputs(meta)
    expected_state = clone(state)
    expected = Mamba1Oracle(SPEC).forward(x, z, weights, expected_state, meta)
    torch.testing.assert_close(impl().forward(x, z, weights, state, meta), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("dtype, state_dtype, atol", [
    (torch.bfloat16, None, 6e-2), (torch.float16, None, 1e-2), (torch.bfloat16, "float32", 3e-2),
])
@pytest.mark.parametrize("batch", [([1, 1, 40, 9], [6, 3, 0, 12], [1, 2, 3, 4]), ([1, 1, 1], [6, 3, 9], [1, 2, 8]),
                                   ([1, 1], [2, 5], [5, 6])], ids=["mixed", "decodes", "decodes-in-place"])
def test_low_precision_runs_close_to_the_oracle(dtype, state_dtype, atol, batch):
    name = dtype_name(dtype)
    spec = Mamba1Spec(d_inner=24, d_state=5, d_conv=4, dt_rank=3, dtype=name, state_dtype=state_dtype)
    meta = step(*batch)
    weights = random_weights(spec, dtype=dtype)
    state = {k: v.to(getattr(torch, state_dtype or name)) for k, v in pools(spec).items()}
    x, z = inputs(meta, dtype=dtype)
    expected_state = clone(state)
    expected = Mamba1Oracle(spec).forward(x, z, weights, expected_state, meta)
    got = impl(spec).forward(x, z, weights, state, meta)
    assert got.dtype == dtype and all(state[k].dtype == expected_state[k].dtype for k in state)
    torch.testing.assert_close(got.float(), expected.float(), atol=atol, rtol=2e-2)
    for k in state:
        torch.testing.assert_close(state[k].float(), expected_state[k].float(), atol=atol, rtol=2e-2)


def _weights_with(**changes):
    w = random_weights(SPEC)
    return w.replace(**changes)


@pytest.mark.parametrize("change, message", [
    (dict(x=torch.zeros(6, 20)), r"x must have shape \[6, 24\], got \[6, 20\]"),
    (dict(x=torch.zeros(6, 24, dtype=torch.float64)), "x must be torch.float32, got torch.float64"),
    (dict(z=torch.zeros(6, 24, device="meta")), "z must be on cpu, got meta"),
    (dict(z=torch.zeros(5, 24)), r"z must have shape \[6, 24\], got \[5, 24\]"),
    (dict(weights=_weights_with(A=torch.zeros(24, 4))), r"A must have shape \[24, 5\], got \[24, 4\]"),
    (dict(weights=_weights_with(conv_bias=None)), "conv_bias must be a tensor of shape \\[24\\].*got None"),
    (dict(weights="not weights"), "weights must be Mamba1Weights, got str"),
    (dict(state={"conv": torch.zeros(4, 24, 3)}), "state is missing ssm"),
    (dict(state={"conv": torch.zeros(4, 24, 4), "ssm": torch.zeros(4, 24, 5)}),
     r"state 'conv' must have shape \[\*, 24, 3\], got \[4, 24, 4\]"),
    (dict(state={"conv": torch.zeros(4, 24, 3), "ssm": torch.zeros(4, 24, 5, dtype=torch.bfloat16)}),
     "state 'ssm' must be torch.float32, got torch.bfloat16"),
    (dict(state={"conv": torch.zeros(4, 3, 24).transpose(1, 2), "ssm": torch.zeros(4, 24, 5)}),
     r"state 'conv' must be \[num_records, 24, 3\] with each record contiguous and records at least one "
     r"record apart \(stride\(0\) >= 72\), got strides \[72, 1, 24\]"),
    (dict(meta=step([1, 5], [3, 0], [1, 4])), r"state slot \[1, 4\] out of range: the pool has 4 slots"),
    (dict(meta=step([1, 5], [3, 0], [2, 2])), r"state slot 2 is given to more than one sequence of the step \(slots \[2, 2\]\)"),
    (dict(meta="a dict"), "meta must be what this backend's builder returns"),
])
def test_bad_inputs_name_the_layer_what_was_expected_and_what_arrived(change, message):
    args = dict(x=torch.zeros(6, 24), z=torch.zeros(6, 24), weights=random_weights(SPEC),
                state={"conv": torch.zeros(4, 24, 3), "ssm": torch.zeros(4, 24, 5)}, meta=step([1, 5], [3, 0], [1, 2]))
    args.update(change)
    with pytest.raises(BackendInputError, match=f"{LAYER}: {message}"):
        impl().forward(**args)


def test_weights_are_checked_again_when_a_layer_gets_other_weights():
    backend, meta = impl(), step([1, 5], [3, 0], [1, 2])
    state = {"conv": torch.zeros(4, 24, 3), "ssm": torch.zeros(4, 24, 5)}
    backend.forward(torch.zeros(6, 24), torch.zeros(6, 24), random_weights(SPEC), state, meta)
    with pytest.raises(BackendInputError, match=rf"{LAYER}: D must have shape \[24\], got \[23\]"):
        backend.forward(torch.zeros(6, 24), torch.zeros(6, 24), _weights_with(D=torch.zeros(23)), state, meta)


def test_the_plugin_registers_through_its_entry_point_and_serves_cpu():
    from mixboard.plugins import load

    loaded = load()
    entries = {n: e for n, e in loaded.backends.items() if e.distribution == "mixboard-mamba1"}
    assert sorted(entries) == ["mamba1_cpu", "mamba1_cuda", "mamba1_torch"]
    assert entries["mamba1_torch"].plugin == "mamba1"
    from mixboard_mamba1.cpu_backend import kernel_unusable

    # on CPU in float32 its C decode step where built; mamba1_torch for everything else
    selection = Registry(loaded).select("mamba1", SPEC, CPU)
    assert selection.chosen.name == ("mamba1_torch" if kernel_unusable() else "mamba1_cpu")
    half = Mamba1Spec(d_inner=24, d_state=5, d_conv=4, dt_rank=3, dtype="bfloat16")
    assert Registry(loaded).select("mamba1", half, CPU).chosen.name == "mamba1_torch"


def test_random_batches_against_the_oracle():
    rng = random.Random(11)
    weights = random_weights(SPEC, 8)
    for trial in range(6):
        n = rng.randint(1, 8)
        decodes = rng.randint(0, n)
        query = [1] * decodes + [rng.randint(1, 50) for _ in range(n - decodes)]
        context = [rng.randint(1, 30) for _ in range(decodes)] + [rng.choice([0, 0, rng.randint(1, 30)])
                                                                   for _ in range(n - decodes)]
        meta = step(query, context, rng.sample(range(SLOTS), n))
        state = pools(SPEC, seed=trial)
        x, z = inputs(meta, seed=trial)
        expected_state = clone(state)
        expected = Mamba1Oracle(SPEC).forward(x, z, weights, expected_state, meta)
        torch.testing.assert_close(impl().forward(x, z, weights, state, meta), expected, atol=1e-5, rtol=0)
        for k in state:
            torch.testing.assert_close(state[k], expected_state[k], atol=1e-5, rtol=0)
