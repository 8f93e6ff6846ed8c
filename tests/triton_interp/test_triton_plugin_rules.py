"""mixboard-triton's selection rule, in the main suite (no triton installed here: the
kernels themselves run in the lane, tests/triton_interp/ci.sh, lane_triton_plugin.py).

Where its backends may run (GPUs Triton compiles for; cpu only under the interpreter, in
float32), and where they rank: above portable PyTorch, below the vendor libraries and below
the first-party CPU kernels."""

from __future__ import annotations

import subprocess
import sys

import pytest

import mixboard.selection
from mixboard import AttentionSpec, Mamba1Spec, MoESpec, Registry, ShortConvSpec, simulate
from mixboard.plugins import load
from mixboard_triton.attention_backend import TritonAttention
from mixboard_triton.mamba1_backend import Mamba1Triton
from mixboard_triton.moe_backend import MoETriton
from mixboard_triton.short_conv_backend import ShortConvTriton

BACKENDS = [(TritonAttention, AttentionSpec), (ShortConvTriton, ShortConvSpec), (Mamba1Triton, Mamba1Spec),
            (MoETriton, MoESpec)]
H100, MI300, V100, T4 = simulate("cuda", "9.0"), simulate("cuda", arch="gfx942"), simulate("cuda", "7.0"), \
    simulate("cuda", "7.5")


@pytest.fixture
def no_interpreter(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


@pytest.fixture
def interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


@pytest.mark.parametrize("backend, spec", BACKENDS)
def test_cpu_only_under_the_interpreter(no_interpreter, backend, spec):
    assert backend.check(spec(), simulate("cpu")) == [
        "runs on cpu only under Triton's interpreter (TRITON_INTERPRET=1), a test lane thousands of times slower "
        "than the CPU backends; on a GPU otherwise"]


@pytest.mark.parametrize("backend, spec", BACKENDS)
def test_float32_only_in_the_interpreter(interpreter, backend, spec):
    assert backend.check(spec(dtype="float32"), simulate("cpu")) == []
    for dtype in ("bfloat16", "float16"):
        assert backend.check(spec(dtype=dtype), simulate("cpu")) == [
            f"Triton's interpreter (TRITON_INTERPRET=1) gives wrong {dtype} results; float32 only there"]


def test_a_half_precision_state_is_refused_in_the_interpreter_too(interpreter):
    assert Mamba1Triton.check(Mamba1Spec(state_dtype="bfloat16"), simulate("cpu")) == [
        "Triton's interpreter (TRITON_INTERPRET=1) gives wrong bfloat16 results; float32 only there"]


@pytest.mark.parametrize("backend, spec", BACKENDS)
@pytest.mark.parametrize("env", [H100, MI300, simulate("xpu")], ids=["h100", "mi300", "xpu"])
def test_every_dtype_on_the_gpus_triton_compiles_for(no_interpreter, backend, spec, env):
    for dtype in ("float32", "bfloat16", "float16"):
        assert backend.check(spec(dtype=dtype), env) == []


def test_nvidia_generations():
    (reason,) = TritonAttention.check(AttentionSpec(), simulate("cuda", "6.1"))
    assert reason == "Triton needs compute capability 7.0 or newer; this GPU has 6.1"
    assert ShortConvTriton.check(ShortConvSpec(dtype="float16"), T4) == []
    (reason,) = Mamba1Triton.check(Mamba1Spec(dtype="bfloat16"), V100)
    assert reason.startswith("bfloat16 needs compute capability 8.0 or newer; this GPU has 7.0")


def test_kernel_limits():
    assert TritonAttention.check(AttentionSpec(num_heads=2, num_kv_heads=1, head_size=512), H100) == [
        "head_size 512 is above the kernel's 256"]
    assert Mamba1Triton.check(Mamba1Spec(d_state=512), H100) == ["d_state 512 is above the kernel's 256"]


def registry_finding(monkeypatch, *modules: str) -> Registry:
    """The installed registry on a machine where ``modules`` are installed (they are not, in the main
    venv): only the module lookup changes; the plugins and their checks are the real ones."""
    real = mixboard.selection.module_missing
    monkeypatch.setattr(mixboard.selection, "module_missing", lambda m: False if m in modules else real(m))
    return Registry(load())


@pytest.fixture
def triton_found(monkeypatch):
    return registry_finding(monkeypatch, "triton")


@pytest.mark.parametrize("kind, spec, portable", [("attention", AttentionSpec(), "sdpa"),
                                                  ("short_conv", ShortConvSpec(), "short_conv_torch"),
                                                  ("mamba1", Mamba1Spec(), "mamba1_torch"),
                                                  ("moe", MoESpec(), "moe_torch")])
def test_above_portable_pytorch_on_a_gpu(no_interpreter, triton_found, kind, spec, portable):
    """Without the vendor libraries (an AMD or Intel GPU, mostly) the Triton kernels serve."""
    for env in (MI300, simulate("xpu")):
        selection = triton_found.select(kind, spec, env)
        assert selection.chosen.cls.priority == 15 and selection.chosen.distribution == "mixboard-triton"
        assert selection.rejected[portable] == (
            f"available, but {selection.chosen.name!r} has higher priority (15 > 10)",)


@pytest.mark.parametrize("kind, spec, vendor", [("attention", AttentionSpec(dtype="bfloat16"), "flash_attn"),
                                                ("short_conv", ShortConvSpec(), "short_conv_cuda"),
                                                ("mamba1", Mamba1Spec(), "mamba1_cuda")])
def test_below_the_vendor_libraries(no_interpreter, monkeypatch, kind, spec, vendor):
    registry = registry_finding(monkeypatch, "triton", "flash_attn", "mamba_ssm", "causal_conv1d")
    selection = registry.select(kind, spec, H100)
    assert selection.chosen.name == vendor
    (mine,) = [c for c in selection.candidates if c.priority == 15]
    assert selection.rejected[mine.name] == (f"available, but {vendor!r} has higher priority (100 > 15)",)
    if kind == "attention":  # flash-attn has no float32: there the Triton kernel serves
        assert registry.select(kind, AttentionSpec(), H100).chosen.name == "triton_attn"


def test_below_the_cpu_kernels_in_the_interpreter(interpreter, triton_found):
    selection = triton_found.select("attention", AttentionSpec(), simulate("cpu"))
    assert selection.chosen.name == "sdpa_cpu"
    assert selection.rejected["triton_attn"] == ("available, but 'sdpa_cpu' has higher priority (20 > 15)",)


def test_listing_imports_neither_torch_nor_triton():
    code = ("import sys, mixboard_triton.plugin as p; p.mixboard_backends(); "
            "print(sorted(m for m in ('torch', 'triton') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
