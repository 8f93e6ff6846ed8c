"""mamba1_cuda on a machine without CUDA: its reasons here, its selection on a
simulated H100, and its argument plumbing run on CPU tensors through test
doubles of causal_conv1d and mamba_ssm (tests/plugins/doubles/mamba1) that
implement the documented semantics of the functions it calls."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

# transformers decides at import whether to route into mamba_ssm: import it
# while no double is findable (FIELD-NOTES), so other tests keep its torch path.
pytest.importorskip("transformers")
import transformers.models.mamba.modeling_mamba  # noqa: E402,F401

from mixboard import CommonBatchMetadata, Mamba1Spec, Mamba1Weights, Registry, simulate  # noqa: E402
from mixboard.dtypes import dtype_name  # noqa: E402
from mixboard.ops.checks import BackendInputError, build_impl  # noqa: E402
from mixboard.selection import module_missing  # noqa: E402
from mixboard.testing import Mamba1Oracle, allocate_state  # noqa: E402
from mixboard_mamba1.cuda_backend import Mamba1Cuda  # noqa: E402
from mixboard_mamba1.torch_backend import Mamba1Torch  # noqa: E402

DOUBLES = Path(__file__).parent / "doubles" / "mamba1"
CPU, H100 = simulate("cpu"), simulate("cuda", "9.0")
SPEC = Mamba1Spec(d_inner=24, d_state=5, d_conv=4, dt_rank=3)
SLOTS = 10


def _forget_libraries():
    for name in list(sys.modules):
        if name.split(".")[0] in ("mamba_ssm", "causal_conv1d"):
            del sys.modules[name]
    module_missing.cache_clear()


@pytest.fixture
def doubles(monkeypatch):
    """The doubles importable as causal_conv1d and mamba_ssm, for this test only."""
    _forget_libraries()
    monkeypatch.syspath_prepend(str(DOUBLES))
    yield
    _forget_libraries()


@pytest.fixture
def no_libraries():
    _forget_libraries()
    assert module_missing("mamba_ssm") and module_missing("causal_conv1d"), "a real mamba_ssm is installed"
    yield


def registry():
    return Registry.from_backends([Mamba1Torch, Mamba1Cuda])


def test_unavailable_here_with_reasons_and_what_to_install(no_libraries):
    selection = registry().select("mamba1", SPEC, CPU)
    assert selection.chosen.name == "mamba1_torch"
    reasons = selection.rejected["mamba1_cuda"]
    assert reasons[0] == "runs on cuda; this environment is cpu"
    said = "; ".join(reasons)
    assert "mamba_ssm" in said and "causal_conv1d" in said and "pip install 'mixboard-mamba1[cuda]'" in said
    # on a CUDA machine without the libraries, only the libraries are missing
    cuda_reasons = registry().select("mamba1", SPEC, H100).rejected["mamba1_cuda"]
    assert cuda_reasons and all("not installed" in r for r in cuda_reasons)


def test_chosen_over_the_portable_backend_where_it_applies(doubles):
    selection = registry().select("mamba1", SPEC, H100)
    assert selection.chosen.name == "mamba1_cuda"
    assert "higher priority (100 > 10)" in selection.rejected["mamba1_torch"][0]
    assert registry().select("mamba1", SPEC, CPU).chosen.name == "mamba1_torch"


@pytest.mark.parametrize("spec, reason", [
    (Mamba1Spec(d_conv=5), "causal-conv1d supports conv widths 2 to 4; the layer's d_conv is 5"),
    (Mamba1Spec(d_inner=1540), "wants d_inner divisible by 8; the layer's d_inner is 1540"),
    (Mamba1Spec(d_state=300), "d_state up to 256; the layer's d_state is 300"),
])
def test_what_the_kernels_cannot_do_is_a_reason(doubles, spec, reason):
    selection = registry().select("mamba1", spec, H100)
    assert selection.chosen.name == "mamba1_torch"
    assert any(reason in r for r in selection.rejected["mamba1_cuda"])


def test_library_versions_without_index_arguments_are_reasons(doubles, distributions):
    distributions.add("mamba-ssm", "2.2.4")
    distributions.add("causal-conv1d", "1.4.0")
    reasons = Mamba1Cuda.check(SPEC, H100)
    assert "mamba-ssm 2.2.4 is installed; mamba1_cuda needs mamba-ssm>=2.3.0: pip install -U 'mamba-ssm>=2.3.0'" in reasons
    assert any(r.startswith("causal-conv1d 1.4.0 is installed") for r in reasons)


def test_newer_versions_pass(distributions):
    distributions.add("mamba-ssm", "2.3.2.post1")
    distributions.add("causal-conv1d", "1.5.0.post8")
    assert Mamba1Cuda.check(SPEC, H100) == []


def test_a_conv_state_in_another_dtype_than_the_layers_is_a_reason(distributions):
    distributions.add("mamba-ssm", "2.3.2.post1")
    distributions.add("causal-conv1d", "1.5.0.post8")
    bf16 = dict(d_inner=24, d_state=5, d_conv=4, dt_rank=3, dtype="bfloat16")
    assert Mamba1Cuda.check(Mamba1Spec(**bf16, state_dtype="float32", conv_state_dtype="bfloat16"), H100) == []
    # conv_state_dtype None follows state_dtype: the conv state would be float32, which causal-conv1d does not keep
    for spec in (Mamba1Spec(**bf16, state_dtype="float32"), Mamba1Spec(**bf16, conv_state_dtype="float32")):
        assert ("causal-conv1d keeps the conv state in the layer's dtype (bfloat16); the layer's is float32 "
                "(conv_state_dtype or state_dtype)") in Mamba1Cuda.check(spec, H100)


# ----------------------------------------------------------------------------- plumbing, through the doubles


def random_weights(spec, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    DI, N, R, W = spec.d_inner, spec.d_state, spec.dt_rank, spec.d_conv

    def r(*shape, scale=1.0, shift=0.0):
        return (torch.randn(*shape, generator=g) * scale + shift).to(dtype)

    return Mamba1Weights(conv_weight=r(DI, W, scale=0.5), conv_bias=r(DI, scale=0.2),
                         x_proj_weight=r(R + 2 * N, DI, scale=0.3), dt_proj_weight=r(DI, R, scale=0.5),
                         dt_proj_bias=r(DI, scale=1.5, shift=-2.0),
                         A=-torch.exp(torch.randn(DI, N, generator=g) * 1.5), D=r(DI))


def noisy_pools(spec, seed=1):
    g = torch.Generator().manual_seed(seed)
    state = allocate_state(Mamba1Cuda.state_spec(spec), SLOTS)
    for t in state.values():
        t.copy_(torch.randn(t.shape, generator=g))
    return state


def step(query_lens, context_lens, slots):
    return CommonBatchMetadata.build(query_lens, context_lens, slots, [[] for _ in slots], block_size=16)


def cuda_impl(spec=SPEC):
    return build_impl(Mamba1Cuda, spec, H100, "model.layers.3.mixer")


@pytest.mark.parametrize("query_lens, context_lens, slots", [
    ([1, 1, 1], [5, 2, 9], [7, 0, 3]),  # decodes only
    ([12], [0], [4]),  # one fresh prefill
    ([1, 1, 7, 30, 2, 3], [4, 12, 0, 5, 0, 3], [2, 8, 0, 5, 9, 1]),  # decodes, fresh and continuing prefills
])
def test_the_kernels_plumbing_matches_the_oracle(doubles, query_lens, context_lens, slots):
    meta = step(query_lens, context_lens, slots)
    weights, state = random_weights(SPEC), noisy_pools(SPEC)
    g = torch.Generator().manual_seed(2)
    x, z = torch.randn(meta.num_tokens, 24, generator=g), torch.randn(meta.num_tokens, 24, generator=g)
    expected_state = {k: v.clone() for k, v in state.items()}
    expected = Mamba1Oracle(SPEC).forward(x, z, weights, expected_state, meta)
    got = cuda_impl().forward(x, z, weights, state, Mamba1Cuda.builder(SPEC, H100)(meta))
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    for k in state:  # the sequences' slots hold the oracle's states, the others are untouched
        torch.testing.assert_close(state[k], expected_state[k], atol=1e-5, rtol=0)


def test_chunked_prefill_then_decodes_equals_the_portable_backend(doubles):
    g = torch.Generator().manual_seed(9)
    seq_x, seq_z = torch.randn(40, 24, generator=g), torch.randn(40, 24, generator=g)
    weights = random_weights(SPEC, 4)
    schedule = [(0, 15), (15, 20), (35, 1), (36, 1), (37, 1), (38, 1), (39, 1)]
    outs = {}
    for name, backend in (("cuda", Mamba1Cuda), ("torch", Mamba1Torch)):
        impl = build_impl(backend, SPEC, H100 if name == "cuda" else CPU, "l")
        state = noisy_pools(SPEC)
        ys = [impl.forward(seq_x[s:s + n], seq_z[s:s + n], weights, state, step([n], [s], [6]))
              for s, n in schedule]
        outs[name] = (torch.cat(ys), state)
    torch.testing.assert_close(outs["cuda"][0], outs["torch"][0], atol=1e-5, rtol=0)
    for k in ("conv", "ssm"):
        torch.testing.assert_close(outs["cuda"][1][k], outs["torch"][1][k], atol=1e-5, rtol=0)


@pytest.mark.parametrize("dtype, state_dtype", [(torch.bfloat16, None), (torch.float16, "float32")])
def test_low_precision_passes_the_kernels_dtype_checks(doubles, dtype, state_dtype):
    name = dtype_name(dtype)
    # causal-conv1d keeps the conv state in the layer's dtype: only the SSM state may differ
    spec = Mamba1Spec(d_inner=24, d_state=5, d_conv=4, dt_rank=3, dtype=name, state_dtype=state_dtype,
                      conv_state_dtype=name if state_dtype else None)
    state = noisy_pools(spec)
    assert state["conv"].dtype == dtype and state["ssm"].dtype == getattr(torch, state_dtype or name)
    meta = step([1, 1, 9, 5], [3, 8, 0, 4], [1, 2, 3, 4])
    weights = random_weights(spec, dtype=dtype)
    g = torch.Generator().manual_seed(3)
    x, z = torch.randn(meta.num_tokens, 24, generator=g).to(dtype), torch.randn(meta.num_tokens, 24, generator=g).to(dtype)
    expected_state = {k: v.clone() for k, v in state.items()}
    expected = Mamba1Oracle(spec).forward(x, z, weights, expected_state, meta)
    got = cuda_impl(spec).forward(x, z, weights, state, meta)
    assert got.dtype == dtype
    torch.testing.assert_close(got.float(), expected.float(), atol=6e-2, rtol=2e-2)
    torch.testing.assert_close(state["ssm"].float(), expected_state["ssm"].float(), atol=6e-2, rtol=2e-2)


def test_bad_inputs_name_the_layer(doubles):
    meta = step([1, 4], [2, 0], [0, 12])
    with pytest.raises(BackendInputError, match=r"model.layers.3.mixer: state slot \[0, 12\] out of range"):
        cuda_impl().forward(torch.zeros(5, 24), torch.zeros(5, 24), random_weights(SPEC), noisy_pools(SPEC), meta)
    meta = step([1, 4], [2, 0], [0, 1])
    with pytest.raises(BackendInputError, match=r"model.layers.3.mixer: x must have shape \[5, 24\], got \[5, 16\]"):
        cuda_impl().forward(torch.zeros(5, 16), torch.zeros(5, 24), random_weights(SPEC), noisy_pools(SPEC), meta)


def test_the_doubles_refuse_what_the_kernels_refuse(doubles):
    """They would catch a layout or dtype the real kernels reject."""
    from causal_conv1d import causal_conv1d_fn, causal_conv1d_update
    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn

    x, w = torch.randn(1, 16, 5), torch.randn(16, 4)  # contiguous along seqlen: not channel-last
    with pytest.raises(RuntimeError, match="initial_states is only supported for channel last layout"):
        causal_conv1d_fn(x, w, initial_states=torch.zeros(1, 16, 3).transpose(1, 2).contiguous().transpose(1, 2))
    with pytest.raises(RuntimeError, match="conv_state_indices must be int32"):
        causal_conv1d_update(torch.randn(2, 16), torch.zeros(4, 16, 3), w, conv_state_indices=torch.tensor([0, 1]))
    u = torch.randn(1, 16, 5)
    with pytest.raises(RuntimeError, match="A must be float32"):
        selective_scan_fn(u, u, torch.zeros(16, 4, dtype=torch.float64), torch.randn(1, 4, 5), torch.randn(1, 4, 5))


def test_the_kit_passes_in_half_precision_over_the_doubles(doubles):
    from kit_over_doubles import kit_failures

    failed, counts = kit_failures(Mamba1Cuda)
    assert not failed and counts["pass"] >= 35, failed
