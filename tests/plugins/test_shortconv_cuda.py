"""short_conv_cuda on this CPU machine: its selection and reasons, and its
argument plumbing through a test double of causal-conv1d
(tests/plugins/doubles/shortconv/causal_conv1d) that implements the
library's documented semantics and argument checks in plain torch."""

from __future__ import annotations

import importlib.util
import random
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
# transformers first: its modeling modules probe causal_conv1d when imported,
# and must bind their own torch fallbacks, not the double.
from transformers.models.lfm2 import modeling_lfm2

from distfactory import write_distribution
from mixboard import Registry, ShortConvSpec, simulate
from mixboard.errors import MixboardError
from mixboard.plugins import load
from mixboard.selection import module_missing
from mixboard_shortconv import ShortConvCuda
from mixboard_shortconv.cuda_backend import installed_version
from test_shortconv_torch import (
    SLOTS, Runner, random_inputs, random_pool, random_step, random_weights, run_steps, sequence_in_steps, step_meta,
    torch_runner,
)

DOUBLES = Path(__file__).parent / "doubles" / "shortconv"
CPU = simulate("cpu")
H100 = simulate("cuda", "9.0")


def _forget_library():
    for name in list(sys.modules):
        if name.split(".")[0] == "causal_conv1d":
            del sys.modules[name]
    sys.path_importer_cache.clear()
    module_missing.cache_clear()


@pytest.fixture
def library(monkeypatch):
    """Puts a causal_conv1d on sys.path for one test; ``library.double()``
    is the test double, ``library.old(version)`` a 1.4-style one with metadata."""

    class Library:
        def double(self):
            monkeypatch.syspath_prepend(str(DOUBLES))
            _forget_library()
            import causal_conv1d

            assert Path(causal_conv1d.__file__).is_relative_to(DOUBLES)
            causal_conv1d.CALLS.clear()
            return causal_conv1d

        def old(self, root, version):
            source = ("def causal_conv1d_fn(x, weight, bias=None, seq_idx=None, initial_states=None,\n"
                      "                     return_final_states=False, final_states_out=None, activation=None): ...\n"
                      "def causal_conv1d_update(x, conv_state, weight, bias=None, activation=None, cache_seqlens=None): ...\n")
            write_distribution(root, "causal-conv1d", version, files={"causal_conv1d/__init__.py": source})
            monkeypatch.syspath_prepend(str(root))
            _forget_library()

    yield Library()
    monkeypatch.undo()
    _forget_library()


def shortconv_registry(monkeypatch):
    """A fresh registry of the installed shortconv plugin, found through its entry point."""
    monkeypatch.setenv("MIXBOARD_PLUGINS", "shortconv")
    monkeypatch.delenv("MIXBOARD_DISABLE_PLUGINS", raising=False)
    monkeypatch.delenv("MIXBOARD_BACKEND", raising=False)
    return Registry(load())


# --------------------------------------------------------------------------- selection


def test_unavailable_here_with_reasons(monkeypatch):
    _forget_library()
    if importlib.util.find_spec("causal_conv1d") is not None:
        pytest.skip("causal-conv1d is installed on this machine")
    registry = shortconv_registry(monkeypatch)
    missing = ("needs Python module 'causal_conv1d', which is not installed "
               "(pip install 'mixboard-shortconv[cuda]' (builds CUDA kernels))")
    from mixboard_shortconv.cpu_backend import kernel_unusable

    cpu = registry.select("short_conv", ShortConvSpec(), CPU)
    assert cpu.chosen.name == ("short_conv_torch" if kernel_unusable() else "short_conv_cpu")
    assert cpu.rejected["short_conv_cuda"] == ("runs on cuda; this environment is cpu", missing)
    h100 = registry.select("short_conv", ShortConvSpec(), H100)
    assert h100.chosen.name == "short_conv_torch" and h100.rejected["short_conv_cuda"] == (missing,)


def test_chosen_over_the_portable_backend_where_it_applies(library, monkeypatch):
    library.double()
    registry = shortconv_registry(monkeypatch)
    for dtype in ("float32", "bfloat16", "float16"):
        selection = registry.select("short_conv", ShortConvSpec(dtype=dtype), H100)
        assert selection.chosen.name == "short_conv_cuda"
        assert "higher priority (100 > 10)" in selection.rejected["short_conv_torch"][0]
    from mixboard_shortconv.cpu_backend import kernel_unusable

    on_cpu = "short_conv_torch" if kernel_unusable() else "short_conv_cpu"
    assert registry.select("short_conv", ShortConvSpec(), CPU).chosen.name == on_cpu


@pytest.mark.parametrize("spec, reason", [
    (ShortConvSpec(conv_width=5), "causal-conv1d's kernels take conv widths 2 to 4; this layer's conv_width is 5"),
    (ShortConvSpec(hidden_size=1020), "needs hidden_size divisible by 8; this layer's is 1020"),
    (ShortConvSpec(dtype="bfloat16", state_dtype="float32"),
     "keeps the conv state in the activations' dtype (bfloat16); this layer asks for state_dtype float32"),
])
def test_layers_it_cannot_serve_go_to_the_portable_backend_with_reasons(library, monkeypatch, spec, reason):
    library.double()
    selection = shortconv_registry(monkeypatch).select("short_conv", spec, H100)
    assert selection.chosen.name == "short_conv_torch"
    (got,) = selection.rejected["short_conv_cuda"]
    assert reason in got


def test_too_old_a_release_is_refused_with_what_to_install(library, monkeypatch, tmp_path):
    library.old(tmp_path, "1.4.0")
    assert installed_version() == "1.4.0"
    (reason,) = ShortConvCuda.check(ShortConvSpec(), H100)
    assert reason == ("causal-conv1d 1.4.0 is installed; this backend needs 1.5 or newer (conv_state_indices): "
                      "pip install -U 'causal-conv1d>=1.5'")
    assert shortconv_registry(monkeypatch).select("short_conv", ShortConvSpec(), H100).chosen.name == "short_conv_torch"
    # built anyway (a forced rule is refused earlier; this is the last line of defence)
    with pytest.raises(MixboardError, match="has no conv_state_indices in causal_conv1d_update; install causal-conv1d>=1.5"):
        ShortConvCuda.make_impl(ShortConvSpec(), H100)


# --------------------------------------------------------------------------- the double itself


@torch.no_grad()
def test_double_agrees_with_transformers_torch_fallbacks(library):
    double = library.double()
    assert modeling_lfm2.causal_conv1d_fn.__module__ == modeling_lfm2.__name__  # transformers' own, not the double
    x = torch.randn(2, 16, 9)
    weight, bias = torch.randn(16, 3), torch.randn(16)
    torch.testing.assert_close(double.causal_conv1d_fn(x, weight, bias), modeling_lfm2.causal_conv1d_fn(x, weight, bias))
    state = torch.randn(2, 16, 3)
    ours, theirs = state.clone(), state.clone()
    step = torch.randn(2, 16, 1)
    torch.testing.assert_close(double.causal_conv1d_update(step, ours, weight, bias),
                               modeling_lfm2.causal_conv1d_update(step, theirs, weight, bias))
    torch.testing.assert_close(ours, theirs)


# --------------------------------------------------------------------------- plumbing


def cuda_runner(spec):
    return Runner(ShortConvCuda, spec, env=H100)


@pytest.mark.parametrize("num_seqs", [1, 3, 8])
@pytest.mark.parametrize("width, bias", [(3, False), (4, True), (2, True)])
def test_plumbing_matches_the_oracle_and_the_portable_backend(library, num_seqs, width, bias):
    double = library.double()
    spec = ShortConvSpec(hidden_size=24, conv_width=width, conv_bias=bias)
    weights = random_weights(spec, seed=width)
    rng = random.Random(num_seqs + width)
    steps = [random_step(rng, num_seqs) for _ in range(3)]
    steps.append(([1] * num_seqs, [4] * num_seqs, rng.sample(range(SLOTS), num_seqs)))
    outs, pool, oracle_pool = run_steps(cuda_runner(spec), spec, weights, steps, seed=num_seqs)
    portable, portable_pool, _ = run_steps(torch_runner(spec), spec, weights, steps, seed=num_seqs)
    for (got, want), (other, _) in zip(outs, portable):
        assert (got - want).abs().max() <= 1e-5
        assert (got - other).abs().max() <= 1e-5
    assert (pool - oracle_pool).abs().max() <= 1e-6
    assert torch.equal(pool, portable_pool)
    # decode-only steps took the update kernel, every other step the conv kernel
    decode_only = sum(all(q == 1 and c > 0 for q, c in zip(qs, cs)) for qs, cs, _ in steps)
    assert double.CALLS == Counter(causal_conv1d_update=decode_only, causal_conv1d_fn=len(steps) - decode_only)


def test_prefill_then_decodes_equals_one_prefill_through_the_kernels(library):
    library.double()
    spec = ShortConvSpec(hidden_size=16, conv_width=4)
    weights, run = random_weights(spec), cuda_runner(spec)
    whole, whole_state = sequence_in_steps(run, spec, weights, 14, [14])
    stepped, stepped_state = sequence_in_steps(run, spec, weights, 14, [2, 3, 1, 1, 6, 1])
    assert (stepped - whole).abs().max() <= 1e-5 and torch.equal(stepped_state, whole_state)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_low_precision_plumbing(library, dtype):
    library.double()
    spec = ShortConvSpec(hidden_size=32, conv_width=3, dtype=dtype)
    steps = [([7, 3], [0, 2], [1, 5]), ([1, 1], [7, 5], [1, 5])]
    outs, pool, ref = run_steps(cuda_runner(spec), spec, random_weights(spec), steps)
    for got, want in outs:
        assert got.dtype == getattr(torch, dtype)
        torch.testing.assert_close(got.float(), want.float(), atol=3e-2, rtol=3e-2)
    assert pool.dtype == getattr(torch, dtype)


def test_an_empty_step_launches_nothing(library):
    double = library.double()
    spec = ShortConvSpec(hidden_size=16, conv_width=3)
    B, C, x = random_inputs(spec, 0, seed=0)
    out = cuda_runner(spec)(B, C, x, random_weights(spec), random_pool(spec, 0), step_meta([], [], []))
    assert out.shape == (0, 16) and not double.CALLS


def test_bad_input_names_the_layer(library):
    library.double()
    spec = ShortConvSpec(hidden_size=16, conv_width=3)
    run = cuda_runner(spec)
    B, C, x = random_inputs(spec, 3, seed=0)
    pool = random_pool(spec, seed=0)
    with pytest.raises(ValueError, match=r"model.layers.3.conv: state slot \[2, 40\] out of range: the pool has 12 slots"):
        run(B[:2], C[:2], x[:2], random_weights(spec), pool, step_meta([1, 1], [3, 3], [2, 40]))


def test_the_kit_passes_in_half_precision_over_the_double(library):
    from kit_over_doubles import kit_failures

    library.double()
    failed, counts = kit_failures(ShortConvCuda)
    assert not failed and counts["pass"] >= 30, failed
