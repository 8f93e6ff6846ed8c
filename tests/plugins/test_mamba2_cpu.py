"""The ``mamba2_cpu`` backend (the prefills' SSD scan in a C kernel) against
the core oracle and transformers' Mamba2Mixer, on what the conformance kit's
short cases do not reach: prefills of several of the kernel's 64-token
chunks and partial last chunks, continuing from saved state, strong decays
over long sequences, groups, head and state sizes off its 16-lane vectors,
one and two threads; decodes updating scattered records of pools laid in
larger pages in place; and how it is listed where it cannot serve."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
import torch

from torch.utils._python_dispatch import TorchDispatchMode

from mixboard import Mamba2Spec, simulate
from mixboard.kinds.mamba2 import mamba2_state
from mixboard.selection import reasons_against
from mixboard.testing.conformance.pages import allocate_in_pages
from mixboard_mamba2.cpu_backend import Mamba2Cpu, kernel_unusable
from test_mamba2_torch import Ours, assert_close, hf_mixer, ungated

sys.path.insert(0, str(Path(__file__).parent / "doubles" / "mamba2"))
from mamba2_cases import OracleRunner, Runner, fresh_state, random_inputs, random_weights, small_spec  # noqa: E402

pytestmark = pytest.mark.skipif(bool(kernel_unusable()), reason="mixboard_mamba2._prefill is not built")

SPECS = {
    "groups": small_spec(n_groups=2, chunk_size=16),
    "sizes_off_lanes": small_spec(num_heads=3, head_dim=20, d_state=5, n_groups=1),
    "wide": small_spec(num_heads=2, head_dim=64, d_state=64, n_groups=1, chunk_size=128),
}


def against_oracle(spec, query, context, slots, seed=0, weights=None):
    """Both pools start from the same random saved states; outputs and every record must agree."""
    weights = weights or random_weights(spec, seed=seed)
    inputs = random_inputs(spec, sum(query), seed=seed + 1)
    ours, theirs = fresh_state(spec, 12), fresh_state(spec, 12)
    for name, pool in ours.items():
        pool.normal_()
        theirs[name].copy_(pool)
    got = Runner(Mamba2Cpu, spec, weights)(inputs, ours, query, context, slots)
    want = OracleRunner(spec, weights)(inputs, theirs, query, context, slots)
    return got, want, ours, theirs


@pytest.mark.parametrize("name", SPECS)
@pytest.mark.parametrize("threads", [1, 2])
def test_ragged_prefills_match_the_oracle(name, threads):
    # decodes first, then fresh and continuing prefills: 1 token, chunk edges (64, 65, 128), several chunks
    query, context, slots = [1, 1, 1, 64, 65, 200, 3, 128], [4, 9, 2, 0, 30, 0, 7, 0], [5, 1, 11, 0, 7, 3, 9, 2]
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        got, want, ours, theirs = against_oracle(SPECS[name], query, context, slots)
    finally:
        torch.set_num_threads(before)
    assert_close(got, want, atol=2e-5, rtol=0)
    for pool in ours:
        assert_close(ours[pool], theirs[pool], atol=2e-5, rtol=0)


def test_random_batches_match_the_oracle():
    rng = random.Random(3)
    spec = SPECS["groups"]
    for trial in range(5):
        n = rng.randint(1, 6)
        nd = rng.randint(0, n - 1)
        query = [1] * nd + [rng.randint(2, 150) for _ in range(n - nd)]
        context = [rng.randint(1, 50) for _ in range(nd)] + [rng.choice([0, rng.randint(1, 50)]) for _ in query[nd:]]
        got, want, ours, theirs = against_oracle(spec, query, context, rng.sample(range(12), n), seed=trial)
        assert_close(got, want, atol=2e-5, rtol=0)
        for pool in ours:
            assert_close(ours[pool], theirs[pool], atol=2e-5, rtol=0)


def test_strong_decays_over_long_sequences_stay_exact():
    """Large per-token decays summed over many tokens: exp(cum_i - cum_j) must not lose precision.
    Outputs reach ~14 here: the chunked scans (this one and mamba2_torch's) are both 2.3e-5 from the
    token-by-token oracle, and 2e-6 from each other."""
    from mixboard_mamba2.torch_backend import Mamba2Torch

    spec = SPECS["wide"]
    weights = random_weights(spec, seed=3)
    weights = weights.replace(A=weights.A * 8)
    inputs = random_inputs(spec, 300, seed=1)
    outs, states = [], []
    for runner in (Runner(Mamba2Cpu, spec, weights), Runner(Mamba2Torch, spec, weights), OracleRunner(spec, weights)):
        state = fresh_state(spec, 2, fill=0.0)
        outs.append(runner(inputs, state, [300], [0], [1]))
        states.append(state["ssm"])
    got, chunked, exact = outs
    assert_close(got, chunked, atol=1e-5, rtol=0)
    assert_close(got, exact, atol=5e-5, rtol=0)
    assert_close(states[0], states[2], atol=2e-5, rtol=0)


@pytest.mark.parametrize("n_groups", [1, 2])
@torch.no_grad()
def test_prefills_match_transformers_mamba2_mixer(n_groups):
    m = hf_mixer(n_groups, chunk_size=64, seed=2)
    lengths = [150, 64, 37, 1]
    torch.manual_seed(1)
    sequences = [torch.randn(n, 32) for n in lengths]
    ours = Ours(m)
    ours.run = Runner(Mamba2Cpu, ours.run.spec, ours.run.weights)
    out = ours(torch.cat(sequences), lengths, [0] * len(lengths), [3, 0, 2, 1])
    for seq, got in zip(sequences, out.split(lengths)):
        assert_close(got, m(seq[None])[0])


@pytest.mark.parametrize("name", ["groups", "wide"])
def test_without_the_gated_norm_matches_the_oracle_and_runs_no_norm(monkeypatch, name):
    """gated_norm=False: the conv and the prefills' scan in C as ever, then the D skip alone (no norm
    kernel); z is NaN and norm_weight None, neither read."""
    from mixboard_mamba2 import _prefill

    def no_norm(*args):
        raise AssertionError("the gated norm kernel ran with gated_norm=False")

    monkeypatch.setattr(_prefill, "gated_norm", no_norm)
    query, context, slots = [1, 1, 64, 65, 3, 128], [4, 9, 0, 30, 7, 0], [5, 1, 0, 7, 9, 2]
    spec = SPECS[name]
    spec, weights, inputs = ungated(spec, random_weights(spec, seed=6), random_inputs(spec, sum(query), seed=7))
    ours, theirs = fresh_state(spec, 12), fresh_state(spec, 12)
    for pool, records in ours.items():
        records.normal_()
        theirs[pool].copy_(records)
    got = Runner(Mamba2Cpu, spec, weights)(inputs, ours, query, context, slots)
    assert_close(got, OracleRunner(spec, weights)(inputs, theirs, query, context, slots), atol=2e-5, rtol=0)
    for pool in ours:
        assert_close(ours[pool], theirs[pool], atol=2e-5, rtol=0)


class Ops(TorchDispatchMode):
    """The names of the aten ops that run inside it."""

    def __init__(self):
        super().__init__()
        self.names: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.add(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


GATHER_OR_SCATTER = {"index_select", "index_copy", "index_copy_", "index_put", "index_put_", "gather", "scatter",
                     "scatter_", "take", "index"}
DECODE_SPECS = {  # the profiled vLLM model's layer (GraniteMoeHybrid, hidden 256), and two off the kernel's lanes
    "vllm_profile": small_spec(num_heads=8, head_dim=64, d_state=16, n_groups=1),
    "groups": SPECS["groups"],
    "sizes_off_lanes": SPECS["sizes_off_lanes"],
}


@pytest.mark.parametrize("name", DECODE_SPECS)
@pytest.mark.parametrize("threads", [1, 2])
def test_decodes_update_scattered_records_of_pools_in_pages_in_place(monkeypatch, name, threads):
    """Steps of decodes only over pools laid in larger pages, as vLLM's hybrid cache lays them (stride(0)
    past a record), the sequences' slots in no order: the C kernel updates each record where it lies. No op
    of a step gathers or scatters records, the bytes between records stay as they were, and outputs and
    every record match the oracle's step after step."""
    from mixboard_mamba2 import cpu_impl

    if cpu_impl._decode is None:
        pytest.skip("mixboard_mamba2._decode is not built")
    calls = []
    kernel = cpu_impl._decode.step
    monkeypatch.setattr(cpu_impl._decode, "step", lambda *args: (calls.append(args[11]), kernel(*args))[1])

    spec = DECODE_SPECS[name]
    weights, records = random_weights(spec, seed=4), 40
    ours, pages = allocate_in_pages(mamba2_state(spec), records, 16, "cpu")
    theirs = fresh_state(spec, records)
    gen = torch.Generator().manual_seed(5)
    for pool, values in ours.items():
        values.normal_(generator=gen)
        theirs[pool].copy_(values)
    slots = random.Random(6).sample(range(records), 16)
    runner, oracle = Runner(Mamba2Cpu, spec, weights), OracleRunner(spec, weights)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for step in range(3):
            inputs = random_inputs(spec, len(slots), seed=10 + step)
            with Ops() as ops:
                got = runner(inputs, ours, [1] * len(slots), [5 + step] * len(slots), slots)
            want = oracle(inputs, theirs, [1] * len(slots), [5 + step] * len(slots), slots)
            assert not ops.names & GATHER_OR_SCATTER, sorted(ops.names & GATHER_OR_SCATTER)
            assert_close(got, want, atol=2e-5, rtol=0)
            for pool in ours:
                assert_close(ours[pool], theirs[pool], atol=2e-5, rtol=0)
    finally:
        torch.set_num_threads(before)
    assert calls == [len(slots)] * 3  # one kernel call a step, for all its decodes
    assert pages.changed() is None


def test_a_build_without_the_decode_kernel_is_refused_naming_it(monkeypatch):
    """_prefill built and _decode not (a partial build): mamba2_cpu is not chosen, and says which."""
    import importlib.util

    from mixboard_mamba2 import cpu_backend

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "mixboard_mamba2._decode" else real(name, *a))
    cpu_backend.kernel_unusable.cache_clear()
    try:
        (reason,) = Mamba2Cpu.check(Mamba2Spec(), simulate("cpu"))
        assert reason.startswith("its compiled kernel mixboard_mamba2._decode is not built (reinstall"), reason
    finally:
        monkeypatch.undo()
        cpu_backend.kernel_unusable.cache_clear()


@pytest.mark.parametrize("d_conv", [2, 3, 5, 8])
def test_conv_windows_of_every_width_match_the_oracle(d_conv):
    """The conv reads and writes sixteen channels' windows at a time, shuffled out of and back into
    their records (mixboard_vec.h's load_interleaved): every width the kernel takes, channels off its
    16 lanes too, decodes and prefills continuing from their windows."""
    query, context, slots = [1, 1, 1, 7, 20], [3, 9, 2, 5, 1], [4, 1, 10, 0, 7]
    for spec in (small_spec(d_conv=d_conv), small_spec(d_conv=d_conv, num_heads=3, head_dim=20, d_state=5, n_groups=1)):
        got, want, ours, theirs = against_oracle(spec, query, context, slots, seed=d_conv)
        assert_close(got, want, atol=2e-5, rtol=0)
        for pool in ours:
            assert_close(ours[pool], theirs[pool], atol=2e-5, rtol=0)


def test_listed_with_reasons_where_it_cannot_serve():
    cpu = simulate("cpu")
    spec = SPECS["groups"]
    assert reasons_against(Mamba2Cpu, spec, cpu) == ()
    # the SSM state in float32 only; the conv state in float32 or bfloat16 (vLLM's bfloat16 layout)
    (reason,) = reasons_against(Mamba2Cpu, small_spec(dtype="bfloat16"), cpu)
    assert "SSM state in float32; the layer keeps it in bfloat16 (state_dtype)" in reason, reason
    assert reasons_against(Mamba2Cpu, small_spec(dtype="bfloat16", state_dtype="float32",
                                                 conv_state_dtype="bfloat16"), cpu) == ()
    (reason,) = reasons_against(Mamba2Cpu, small_spec(state_dtype="float32", conv_state_dtype="float16"), cpu)
    assert "float32 or bfloat16; the layer keeps it in float16 (conv_state_dtype)" in reason, reason
    assert reasons_against(Mamba2Cpu, small_spec(dtype="float16", state_dtype="float32"), cpu)  # not declared
    assert any("cpu" in r for r in reasons_against(Mamba2Cpu, spec, simulate("cuda", "9.0")))
    assert isinstance(spec, Mamba2Spec)


BF16_SPECS = {  # vLLM's bfloat16 layout (conv state bfloat16, SSM state float32); both states float32
    "vllm_profile": small_spec(num_heads=8, head_dim=64, d_state=16, n_groups=1, chunk_size=16, dtype="bfloat16",
                               state_dtype="float32", conv_state_dtype="bfloat16"),
    "sizes_off_lanes": small_spec(num_heads=3, head_dim=20, d_state=5, n_groups=1, dtype="bfloat16",
                                  state_dtype="float32", conv_state_dtype="bfloat16"),
    "conv_state_float32": small_spec(dtype="bfloat16", state_dtype="float32"),
    "ungated": small_spec(num_heads=8, head_dim=64, d_state=16, n_groups=1, chunk_size=16, dtype="bfloat16",
                          state_dtype="float32", conv_state_dtype="bfloat16", gated_norm=False),
}


@pytest.mark.parametrize("name", BF16_SPECS)
def test_bfloat16_layers_run_the_kernels_and_match_mamba2_torch(monkeypatch, name):
    """A bfloat16 layer (bfloat16 weights and inputs, SSM state float32), its pools laid in larger pages
    as vLLM lays them: every part runs in C (each kernel counted; "ungated": no norm, the D skip
    mamba2_torch's), summed in float32 as mamba2_torch sums it. Steps of decodes with prefills, then
    decodes alone: the conv pools equal mamba2_torch's bit for bit (they hold the raw bfloat16 inputs),
    the SSM pools agree to float32 rounding, the outputs to a bfloat16 rounding; both stay near the
    float64 oracle; the bytes between records stay as they were."""
    from mixboard_mamba2 import _decode, _prefill, cpu_impl
    from mixboard_mamba2.torch_backend import Mamba2Torch

    spec = BF16_SPECS[name]
    calls = []

    def counted(name, kernel):
        return lambda *args: (calls.append(name), kernel(*args))[1]

    conv_kernel = "conv_bf16" if spec.conv_dtype == "bfloat16" else "conv"
    monkeypatch.setitem(cpu_impl.CONV_OVER, getattr(torch, spec.conv_dtype),
                        counted(conv_kernel, getattr(_prefill, conv_kernel)))
    for module, kernel in ((_prefill, "ssd"), (_prefill, "gated_norm"), (_decode, "step")):
        monkeypatch.setattr(module, kernel, counted(kernel, getattr(module, kernel)))

    weights = random_weights(spec, seed=8, dtype=torch.bfloat16)
    inputs = lambda tokens, seed: random_inputs(spec, tokens, seed=seed, dtype=torch.bfloat16)  # noqa: E731
    if not spec.gated_norm:
        spec, weights, _ = ungated(spec, weights, inputs(1, 0))
        inputs = lambda tokens, seed: ungated(spec, weights, random_inputs(spec, tokens, seed=seed,  # noqa: E731
                                                                           dtype=torch.bfloat16))[2]
    ours, pages = allocate_in_pages(mamba2_state(spec), 12, 16, "cpu")
    torchs, theirs = fresh_state(spec, 12), fresh_state(spec, 12)
    gen = torch.Generator().manual_seed(9)
    for pool, values in ours.items():
        values.copy_(torch.randn(values.shape, generator=gen))
        torchs[pool].copy_(values)
        theirs[pool].copy_(values)
    assert (ours["conv"].dtype, ours["ssm"].dtype) == (getattr(torch, spec.conv_dtype), torch.float32)
    runners = Runner(Mamba2Cpu, spec, weights), Runner(Mamba2Torch, spec, weights), OracleRunner(spec, weights)
    steps = (([1, 1, 70, 5], [4, 9, 0, 12], [5, 1, 0, 7]), ([1, 1, 1, 1], [5, 10, 70, 17], [5, 1, 0, 7]),
             ([1, 1, 1, 1], [6, 11, 71, 18], [5, 1, 0, 7]))
    for step, (query, context, slots) in enumerate(steps):
        tokens = inputs(sum(query), 20 + step)
        got, chunked, exact = (run(tokens, pools, query, context, slots)
                               for run, pools in zip(runners, (ours, torchs, theirs)))
        assert got.dtype == torch.bfloat16
        torch.testing.assert_close(got, chunked, atol=2e-2, rtol=1e-2)  # a bfloat16 ulp near the outputs' size
        torch.testing.assert_close(got.float(), exact.float(), atol=5e-2, rtol=2e-2)
        assert torch.equal(ours["conv"], torchs["conv"])
        torch.testing.assert_close(ours["ssm"], torchs["ssm"], atol=2e-5, rtol=1e-5)
        torch.testing.assert_close(ours["ssm"], theirs["ssm"].float(), atol=2e-4, rtol=1e-4)
    assert pages.changed() is None
    norm = ["gated_norm"] if spec.gated_norm else []
    per_step = {"mixed": [conv_kernel, "step", "ssd", *norm], "decodes": [conv_kernel, "step", *norm]}
    assert calls == per_step["mixed"] + per_step["decodes"] * 2, calls


def test_a_bfloat16_conv_pool_rounds_as_torch_does():
    """A float32 layer may keep its conv state in bfloat16 (conv_state_dtype): conv_bf16 narrows each
    input it keeps. Width 2 keeps a sequence's last input: one token per sequence lands each crafted value
    in the pool (ties at several exponents, the largest floats, infinities, subnormals, signed zeros,
    random bit patterns), over a whole 16-channel block and a partial one; each must equal torch's
    rounding. NaNs stay NaNs."""
    from mixboard_mamba2 import _prefill

    D = 21  # one block of 16 channels (vector narrowing) and 5 more (one at a time)
    bits = [0x3F808000, 0x3F818000, 0x3F80FFFF, 0x3F817FFF, 0x7F7FFFFF, 0x7F7F8000, 0x7F7F7FFF, 0xFF7FFFFF,
            0x7F800000, 0xFF800000, 0x00000001, 0x00008000, 0x00018000, 0x807FFFFF, 0x00000000, 0x80000000,
            0x4B7FFFFF, 0xC0490FDB, 0x00400000, 0x3C008000, 0x3C018000]
    gen = torch.Generator().manual_seed(4)
    random_bits = torch.randint(0, 2**32, (40 * D,), generator=gen, dtype=torch.int64).tolist()
    values = torch.tensor(bits + random_bits, dtype=torch.int64).to(torch.int32).view(torch.float32).view(-1, D)
    n = values.shape[0]
    pool = torch.zeros(n, D, 1, dtype=torch.bfloat16)
    weight = torch.zeros(2, D)
    out = torch.empty(n, D)
    seqs = torch.tensor([[t, t + 1, t, 0] for t in range(n)], dtype=torch.int64)  # token t, fresh, slot t
    _prefill.conv_bf16(values.data_ptr(), D, D, 2, weight.data_ptr(), 0, pool.data_ptr(), D, out.data_ptr(), D,
                       seqs.data_ptr(), n)
    want = values.to(torch.bfloat16)
    nan = want.isnan()
    assert torch.equal(pool[:, :, 0].isnan(), nan)
    assert torch.equal(pool[:, :, 0][~nan].view(torch.int16), want[~nan].view(torch.int16))
