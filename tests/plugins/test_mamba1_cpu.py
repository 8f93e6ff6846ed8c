"""The ``mamba1_cpu`` backend (decode steps in a C kernel over the state pools)
against the core oracle, on what the conformance kit's short cases do not
reach: long runs of decodes over slots that are not consecutive, Mamba's
d_state 16 (the kernel's fast path) and sizes off its 16-lane blocks, conv
widths 2 to 5, with and without conv bias, one and two threads, extreme
decays and gates; mixed steps through mamba1_torch; bfloat16 layers in
vLLM's layout (conv state bfloat16, SSM state float32) against mamba1_torch;
and how it is listed where it cannot serve."""

from __future__ import annotations

import pytest
import torch

from mixboard import CommonBatchMetadata, Mamba1Spec, simulate
from mixboard.ops.checks import BackendInputError, build_impl
from mixboard.selection import reasons_against
from mixboard.testing import Mamba1Oracle
from mixboard_mamba1.cpu_backend import Mamba1Cpu, kernel_unusable
from test_mamba1_torch import clone, pools, random_weights

pytestmark = pytest.mark.skipif(bool(kernel_unusable()), reason="mixboard_mamba1._decode_step is not built")

CPU = simulate("cpu")
SPECS = {
    "mamba_16": Mamba1Spec(d_inner=96, d_state=16, d_conv=4, dt_rank=6),  # the fast path, 1.5 blocks of 64
    "odd_sizes": Mamba1Spec(d_inner=37, d_state=5, d_conv=3, dt_rank=3),
    "wide_state": Mamba1Spec(d_inner=48, d_state=40, d_conv=2, dt_rank=17, conv_bias=False),
    "conv_5": Mamba1Spec(d_inner=32, d_state=16, d_conv=5, dt_rank=1),
}
SLOTS = [9, 2, 5, 0, 7]  # not consecutive, not in order


def decode_run(spec, impl, steps, seed=4, scale=1.0):
    """Prefill each sequence through the oracle, then ``steps`` decode steps of all of them through ``impl``."""
    weights, state = random_weights(spec, seed), pools(spec)
    g = torch.Generator().manual_seed(seed + 1)
    n = len(SLOTS)
    prefill = CommonBatchMetadata.build([3] * n, [0] * n, SLOTS, [[] for _ in SLOTS], block_size=16)
    x = torch.randn(3 * n, spec.d_inner, generator=g)
    Mamba1Oracle(spec).forward(x, x, weights, state, prefill)
    outs = []
    for t in range(steps):
        meta = CommonBatchMetadata.build([1] * n, [3 + t] * n, SLOTS, [[] for _ in SLOTS], block_size=16)
        x = torch.randn(n, spec.d_inner, generator=g) * scale
        z = torch.randn(n, spec.d_inner, generator=g) * scale
        outs.append(impl.forward(x, z, weights, state, meta))
    return torch.stack(outs), state


@pytest.mark.parametrize("name", SPECS)
@pytest.mark.parametrize("threads", [1, 2])
def test_long_decode_runs_match_the_oracle(name, threads):
    spec = SPECS[name]
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        got, state = decode_run(spec, build_impl(Mamba1Cpu, spec, CPU, "layer"), steps=12)
    finally:
        torch.set_num_threads(before)
    want, want_state = decode_run(spec, Mamba1Oracle(spec), steps=12)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-5)
    for key in state:
        torch.testing.assert_close(state[key], want_state[key], atol=2e-5, rtol=2e-5)


def test_extreme_inputs_saturate_as_the_oracle_does():
    """Large inputs push dt through softplus's linear branch, decays to 0 and gates into silu's tails."""
    spec = SPECS["mamba_16"]
    got, state = decode_run(spec, build_impl(Mamba1Cpu, spec, CPU, "layer"), steps=4, scale=30.0)
    want, want_state = decode_run(spec, Mamba1Oracle(spec), steps=4, scale=30.0)
    assert torch.isfinite(got).all()
    # outputs reach ~1e7 here: float32 sums taken in another order differ by a few 1e-5 relative
    torch.testing.assert_close(got, want, atol=1e-4, rtol=2e-4)
    for key in state:
        torch.testing.assert_close(state[key], want_state[key], atol=1e-4, rtol=2e-4)


def test_a_step_with_a_prefill_is_mamba1_torchs_and_leaves_other_slots_alone():
    spec = SPECS["odd_sizes"]
    weights, state = random_weights(spec, 7), pools(spec)
    meta = CommonBatchMetadata.build([1, 1, 6], [4, 9, 0], [3, 1, 8], [[], [], []], block_size=16)
    g = torch.Generator().manual_seed(8)
    x, z = torch.randn(8, spec.d_inner, generator=g), torch.randn(8, spec.d_inner, generator=g)
    expected_state = clone(state)
    want = Mamba1Oracle(spec).forward(x, z, weights, expected_state, meta)
    got = build_impl(Mamba1Cpu, spec, CPU, "layer").forward(x, z, weights, state, meta)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-5)
    for key in state:
        torch.testing.assert_close(state[key], expected_state[key], atol=2e-5, rtol=2e-5)


def test_bad_slots_are_refused_before_the_kernel_runs():
    spec = SPECS["mamba_16"]
    weights, state = random_weights(spec), pools(spec)
    x = torch.randn(2, spec.d_inner)
    impl = build_impl(Mamba1Cpu, spec, CPU, "model.layers.3.mixer")
    outside = CommonBatchMetadata.build([1, 1], [2, 2], [1, 99], [[], []], block_size=16)
    with pytest.raises(BackendInputError, match="model.layers.3.mixer"):
        impl.forward(x, x, weights, state, outside)
    twice = CommonBatchMetadata.build([1, 1], [2, 2], [4, 4], [[], []], block_size=16)
    with pytest.raises(BackendInputError, match="state slot 4 is given to more than one sequence"):
        impl.forward(x, x, weights, state, twice)


def test_listed_with_reasons_where_it_cannot_serve():
    spec = SPECS["mamba_16"]
    assert reasons_against(Mamba1Cpu, spec, CPU) == ()
    # the SSM state in float32 only; the conv state in float32 or bfloat16 (vLLM's bfloat16 layout)
    sized = dict(d_inner=96, d_state=16, d_conv=4, dt_rank=6)
    (reason,) = reasons_against(Mamba1Cpu, Mamba1Spec(**sized, dtype="bfloat16"), CPU)
    assert "SSM state in float32; the layer keeps it in bfloat16 (state_dtype)" in reason, reason
    assert reasons_against(Mamba1Cpu, Mamba1Spec(**sized, dtype="bfloat16", state_dtype="float32",
                                                 conv_state_dtype="bfloat16"), CPU) == ()
    (reason,) = reasons_against(Mamba1Cpu, Mamba1Spec(**sized, conv_state_dtype="float16"), CPU)
    assert "float32 or bfloat16; the layer keeps it in float16 (conv_state_dtype)" in reason, reason
    assert reasons_against(Mamba1Cpu, Mamba1Spec(**sized, dtype="float16", state_dtype="float32"), CPU)  # not declared
    assert any("cpu" in r for r in reasons_against(Mamba1Cpu, spec, simulate("cuda", "9.0")))


BF16_SPECS = {  # vLLM's bfloat16 layout (conv state bfloat16, SSM state float32); both states float32
    "vllm_layout": Mamba1Spec(d_inner=96, d_state=16, d_conv=4, dt_rank=6, dtype="bfloat16", state_dtype="float32",
                              conv_state_dtype="bfloat16"),
    "jamba_norms_off_lanes": Mamba1Spec(d_inner=37, d_state=5, d_conv=3, dt_rank=3, dtype="bfloat16",
                                        state_dtype="float32", conv_state_dtype="bfloat16", dt_bc_norms=True),
    "conv_state_float32": Mamba1Spec(d_inner=48, d_state=16, d_conv=2, dt_rank=4, dtype="bfloat16",
                                     state_dtype="float32"),
    # a float32 layer keeping its conv state in bfloat16: the kernel narrows each input it keeps
    "float32_layer": Mamba1Spec(d_inner=40, d_state=16, d_conv=4, dt_rank=4, conv_state_dtype="bfloat16"),
    "conv_5": Mamba1Spec(d_inner=32, d_state=16, d_conv=5, dt_rank=2, dtype="bfloat16", state_dtype="float32",
                         conv_state_dtype="bfloat16"),  # a width conv_rows does not instantiate
}


@pytest.mark.parametrize("name", BF16_SPECS)
def test_bfloat16_decodes_run_the_kernel_and_match_mamba1_torch(monkeypatch, name):
    """A bfloat16 layer (bfloat16 weights and inputs, A float32 as vLLM keeps it), its pools laid in larger
    pages: a mixed step (mamba1_torch's), then decode steps, each one kernel call. The conv pools equal
    mamba1_torch's bit for bit (the raw bfloat16 inputs; a float32 layer's rounded to nearest even), the
    SSM pools agree to float32 rounding, the outputs to a bfloat16 rounding; both stay near the float64
    oracle; the bytes between records stay as they were."""
    from mixboard.kinds.mamba1 import mamba1_state
    from mixboard.testing.conformance.pages import allocate_in_pages
    from mixboard_mamba1 import cpu_impl
    from mixboard_mamba1.torch_backend import Mamba1Torch

    spec = BF16_SPECS[name]
    calls = []
    conv_dtype = getattr(torch, spec.conv_dtype)
    kernel = cpu_impl.STEP_OVER[conv_dtype]
    monkeypatch.setitem(cpu_impl.STEP_OVER, conv_dtype, lambda *args: (calls.append(conv_dtype), kernel(*args))[1])
    dtype = getattr(torch, spec.dtype)
    weights = random_weights(spec, seed=8, dtype=dtype)
    fields = {k: getattr(weights, k) for k in weights.__slots__ if hasattr(weights, k)}
    fields["A"] = weights.A.float()
    if spec.dt_bc_norms:
        g = torch.Generator().manual_seed(3)
        for part, size in (("dt", spec.dt_rank), ("b", spec.d_state), ("c", spec.d_state)):
            fields[f"{part}_norm_weight"] = (1 + 0.3 * torch.randn(size, generator=g)).to(dtype)
    weights = type(weights)(**fields)
    exact = type(weights)(**{k: (None if v is None else v.double()) for k, v in fields.items()})
    ours, pages = allocate_in_pages(mamba1_state(spec), 10, 16, "cpu")
    torchs, theirs = pools(spec), pools(spec)
    for pool in ours:
        ours[pool].copy_(torchs[pool])
    theirs["ssm"] = theirs["ssm"].double()  # the oracle's conv pool in the layer's conv dtype: the same roundings
    assert (ours["conv"].dtype, ours["ssm"].dtype) == (conv_dtype, torch.float32)
    impls = build_impl(Mamba1Cpu, spec, CPU, "layer"), build_impl(Mamba1Torch, spec, CPU, "layer")
    oracle = Mamba1Oracle(Mamba1Spec(**{**spec.to_dict(), "dtype": "float64", "state_dtype": None,
                                         "conv_state_dtype": None}))
    g = torch.Generator().manual_seed(9)
    steps = [([1, 1, 1, 9], [4, 9, 12, 0])] + [([1] * 4, [5 + t, 10 + t, 13 + t, 9 + t]) for t in range(4)]
    for query, context in steps:
        meta = CommonBatchMetadata.build(query, context, SLOTS[:4], [[] for _ in query], block_size=16)
        x, z = (torch.randn(sum(query), spec.d_inner, generator=g).to(dtype) for _ in range(2))
        got = impls[0].forward(x, z, weights, ours, meta)
        near = impls[1].forward(x, z, weights, torchs, meta)
        best = oracle.forward(x.double(), z.double(), exact, theirs, meta)
        assert got.dtype == dtype
        torch.testing.assert_close(got, near, atol=2e-2, rtol=1e-2)  # a bfloat16 ulp near the outputs' size
        torch.testing.assert_close(got.double(), best, atol=5e-2, rtol=2e-2)
        assert torch.equal(ours["conv"], torchs["conv"])
        torch.testing.assert_close(ours["ssm"], torchs["ssm"], atol=2e-5, rtol=1e-5)
        torch.testing.assert_close(ours["ssm"].double(), theirs["ssm"], atol=2e-4, rtol=1e-4)
    assert pages.changed() is None
    assert calls == [conv_dtype] * 4  # the mixed step is mamba1_torch's; each decode step one kernel call


@pytest.mark.parametrize("fields", [dict(dtype="bfloat16"), dict(dtype="bfloat16", state_dtype="float32",
                                                                  conv_state_dtype="float16")])
def test_an_impl_built_for_states_the_kernel_does_not_keep_never_calls_it(monkeypatch, fields):
    """Selection refuses these specs (the SSM state in bfloat16, the conv state in float16); an impl built
    for one directly still never hands the kernel pools it would misread: it runs mamba1_torch's code."""
    from mixboard.kinds.mamba1 import mamba1_state
    from mixboard.testing import allocate_state
    from mixboard_mamba1 import cpu_impl
    from mixboard_mamba1.torch_backend import Mamba1Torch

    spec = Mamba1Spec(d_inner=32, d_state=16, d_conv=4, dt_rank=2, **fields)
    for dtype in list(cpu_impl.STEP_OVER):
        monkeypatch.setitem(cpu_impl.STEP_OVER, dtype, lambda *args: pytest.fail("the kernel was called"))
    weights = random_weights(spec, seed=2, dtype=torch.bfloat16)
    ours, theirs = (allocate_state(mamba1_state(spec), 10) for _ in range(2))
    for pool in ours:
        ours[pool].copy_(torch.randn(ours[pool].shape))
        theirs[pool].copy_(ours[pool])
    meta = CommonBatchMetadata.build([1, 1], [3, 5], [4, 7], [[], []], block_size=16)
    x, z = torch.randn(2, 32).bfloat16(), torch.randn(2, 32).bfloat16()
    got = cpu_impl.Mamba1CpuImpl(spec).forward(x, z, weights, ours, meta)
    want = build_impl(Mamba1Torch, spec, CPU, "layer").forward(x, z, weights, theirs, meta)
    assert torch.equal(got, want)
