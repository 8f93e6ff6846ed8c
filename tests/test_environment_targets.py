"""An environment vendors can target: ROCm told apart from CUDA, GPU
architecture names, CPU features; detected, and simulated from any machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mixboard import AttentionSpec, Backend, Environment, Registry, UsageError, simulate
from mixboard.cpu_features import CPU_FEATURES
from mixboard.environment import detect, for_device, resolve


class NeedsHopper(Backend):
    """An NVIDIA-only kernel written with the helper, as a vendor would."""

    name, kind, devices, dtypes, api_version = "hopper_attn", "attention", ("cuda",), ("float32",), 1

    @classmethod
    def check(cls, spec, env):
        return [] if env.capability_at_least(9, 0) else ["needs an NVIDIA GPU of compute capability 9.0 or newer"]


class NeedsAvx512(Backend):
    name, kind, devices, dtypes, api_version = "avx512_attn", "attention", ("cpu",), ("float32",), 1

    @classmethod
    def check(cls, spec, env):
        return [] if env.has_cpu_feature("avx512") else ["needs a CPU with AVX-512"]


class Portable(Backend):
    name, kind, devices, dtypes, api_version = "portable", "attention", ("*",), ("float32",), 1


def chosen(env, *backends):
    return Registry.from_backends([*backends, Portable]).select("attention", AttentionSpec(), env).chosen.name


# -- ROCm is not NVIDIA -----------------------------------------------------------------


def test_an_amd_gpu_never_satisfies_an_nvidia_capability_check():
    mi300 = simulate("cuda", arch="gfx942")
    assert (mi300.runtime, mi300.arch, mi300.capability) == ("rocm", "gfx942", None)
    assert mi300.is_rocm and not mi300.is_nvidia and not mi300.capability_at_least(9, 0)
    assert chosen(mi300, NeedsHopper) == "portable"
    with pytest.raises(ValueError, match="NVIDIA compute capability"):
        Environment("cuda", (9, 4), runtime="rocm")  # what torch reports on an MI300 cannot pass as NVIDIA's
    with pytest.raises(UsageError, match="9.4 is an NVIDIA compute capability; gfx942 is an AMD GPU"):
        simulate("cuda", "9.4", arch="gfx942")


def test_sm_90_is_an_h100_and_equals_capability_9_0():
    h100 = simulate("cuda", arch="sm_90")
    assert (h100.runtime, h100.arch, h100.capability) == ("cuda", "sm_90", (9, 0))
    assert h100 == simulate("cuda", "9.0") == Environment("cuda", (9, 0), h100.torch_version,
                                                          cpu_features=h100.cpu_features)
    assert h100.is_nvidia and h100.capability_at_least(9, 0) and not h100.capability_at_least(10, 0)
    assert chosen(h100, NeedsHopper) == "hopper_attn"
    assert chosen(simulate("cuda", arch="sm_80"), NeedsHopper) == "portable"
    assert simulate("cuda", arch="sm_100a").capability == (10, 0)
    assert simulate("cuda", arch="gfx90a:sramecc+:xnack-").arch == "gfx90a"  # a ROCm target id


def fake_gpu(monkeypatch, *, hip: str | None, capability: tuple[int, int], gcn: str = ""):
    """torch as it looks on a GPU machine: ROCm torch also says cuda and reports a capability."""
    import torch

    class Props:
        gcnArchName = gcn

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: Props())
    monkeypatch.setattr(torch.version, "hip", hip)
    detect.cache_clear()


@pytest.fixture
def fresh_detect():
    detect.cache_clear()
    yield
    detect.cache_clear()


def test_detection_on_rocm_keeps_the_gfx_name_and_drops_the_capability(monkeypatch, fresh_detect):
    fake_gpu(monkeypatch, hip="6.2.41133", capability=(9, 4), gcn="gfx942:sramecc+:xnack-")
    for env in (detect(), for_device("cuda:0")):
        assert (env.device, env.runtime, env.arch, env.capability) == ("cuda", "rocm", "gfx942", None)
        assert not env.capability_at_least(9, 0)
    assert chosen(detect(), NeedsHopper) == "portable"


def test_detection_on_nvidia_names_the_sm_arch(monkeypatch, fresh_detect):
    fake_gpu(monkeypatch, hip=None, capability=(9, 0))
    env = detect()
    assert (env.device, env.runtime, env.arch, env.capability) == ("cuda", "cuda", "sm_90", (9, 0))
    assert chosen(env, NeedsHopper) == "hopper_attn"


# -- CPU features ---------------------------------------------------------------------


def test_simulated_cpu_features_enable_and_disable_a_backend():
    assert chosen(simulate("cpu", cpu_features="avx512"), NeedsAvx512) == "avx512_attn"
    assert chosen(simulate("cpu", cpu_features="amx"), NeedsAvx512) == "avx512_attn"  # amx brings avx512
    avx2 = simulate("cpu", cpu_features="avx2")
    assert chosen(avx2, NeedsAvx512) == "portable"
    selection = Registry.from_backends([NeedsAvx512, Portable]).select("attention", AttentionSpec(), avx2)
    assert selection.rejected["avx512_attn"] == ("needs a CPU with AVX-512",)
    assert simulate("cpu", cpu_features="none").cpu_features == frozenset()
    assert simulate("cpu").cpu_features == detect().cpu_features  # not given: this machine's


def test_cpu_feature_names_are_checked():
    with pytest.raises(UsageError, match="unknown CPU feature 'avx3'; known: avx2, avx512"):
        simulate("cpu", cpu_features="avx3")
    with pytest.raises(UsageError, match=r"\(x86\) and neon \(Arm\) cannot be on one CPU"):
        simulate("cpu", cpu_features="avx2,neon")
    with pytest.raises(ValueError, match="unknown CPU feature 'avx-512'"):
        simulate("cpu").has_cpu_feature("avx-512")  # a typo in check() is loud, not a silent "no"


def _cpuinfo_flags() -> set[str]:
    """The first processor's flags, read here independently of mixboard."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.split(":")[0].strip() in ("flags", "Features"):
            return set(line.split(":", 1)[1].split())
    pytest.skip("/proc/cpuinfo lists no flags")


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="needs Linux's /proc/cpuinfo")
def test_detected_cpu_features_agree_with_proc_cpuinfo():
    flags = _cpuinfo_flags()
    expected = {
        "avx2": {"avx2", "fma"} <= flags,
        "avx512": {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= flags,
        "avx512_vnni": "avx512_vnni" in flags,
        "avx512_bf16": "avx512_bf16" in flags,
        "amx": {"amx_tile", "amx_bf16"} <= flags,
        "neon": bool({"asimd", "neon"} & flags),
        "sve": "sve" in flags,
    }
    assert set(expected) == set(CPU_FEATURES)
    features = detect().cpu_features
    assert {name for name, present in expected.items() if present} == features
    assert for_device("cpu").cpu_features == features
    assert detect().to_dict()["cpu_features"] == [n for n in CPU_FEATURES if n in features]


# -- the environment as data ------------------------------------------------------------


def test_to_dict_keeps_the_old_keys_and_adds_runtime_arch_and_features():
    data = simulate("cuda", arch="gfx942", cpu_features="avx2").to_dict()
    assert data == {"device": "cuda", "capability": None, "torch_version": data["torch_version"],
                    "runtime": "rocm", "arch": "gfx942", "cpu_features": ["avx2"]}
    assert str(simulate("cuda", arch="gfx942")).startswith("cuda (AMD ROCm gfx942), torch ")
    assert str(simulate("cuda", "9.0")).startswith("cuda (NVIDIA sm_90, capability 9.0), torch ")
    assert str(simulate("cpu", cpu_features="amx")).startswith("cpu (avx2, avx512, amx), torch ")


@pytest.mark.parametrize("kwargs, message", [
    (dict(arch="sm_9"), "bad --arch 'sm_9': write sm_XY for NVIDIA"),
    (dict(arch="hopper"), "bad --arch 'hopper'"),
    (dict(capability="8.0", arch="sm_90"), "--capability 8.0 contradicts --arch sm_90 (capability 9.0)"),
    (dict(device="cpu", arch="sm_90"), "--arch applies to device cuda"),
    (dict(device="mps", capability="9.0"), "--capability applies to device cuda, not 'mps'"),
    (dict(device="rocm"), "unknown device 'rocm'; expected one of cpu, cuda"),
])
def test_bad_simulations_are_one_clear_line(kwargs, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        resolve(**kwargs)
    assert "\n" not in str(info.value)


def test_flags_alone_imply_their_device():
    assert resolve(arch="gfx942").device == "cuda" and resolve(capability="8.6").device == "cuda"
    assert resolve(cpu_features="avx2").device == "cpu"


# -- the CLI ------------------------------------------------------------------------------


def mixboard(*args):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MIXBOARD_")}
    return subprocess.run([sys.executable, "-m", "mixboard_runner", *args], capture_output=True, text=True,
                          env=environ)


def test_backends_shows_a_simulated_mi300x():
    out = mixboard("backends", "--arch", "gfx942", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert rows and {json.dumps(r["environment"], sort_keys=True) for r in rows} == {
        json.dumps(simulate("cuda", arch="gfx942").to_dict(), sort_keys=True)}
    assert rows[0]["environment"]["runtime"] == "rocm" and rows[0]["environment"]["capability"] is None
    out = mixboard("backends", "--arch", "gfx942", "--kind", "attention")
    assert out.stdout.splitlines()[0].startswith("environment: cuda (AMD ROCm gfx942), torch ")


def test_backends_on_a_simulated_cpu_says_what_it_assumed():
    out = mixboard("backends", "--device", "cpu", "--kind", "attention")
    lines = out.stdout.splitlines()
    assert lines[0].startswith("environment: cpu (")
    assert lines[1] == "  (CPU features are this machine's; --cpu-features simulates others)"
    out = mixboard("backends", "--cpu-features", "avx2", "--kind", "attention")
    assert out.stdout.splitlines()[0] == f"environment: {simulate('cpu', cpu_features='avx2')}"
    assert "CPU features are this machine's" not in out.stdout


@pytest.mark.parametrize("args, message", [
    (["backends", "--arch", "sm_9"], "bad --arch 'sm_9'"),
    (["backends", "--capability", "9.4", "--arch", "gfx942"], "9.4 is an NVIDIA compute capability"),
    (["select", "attention", "--cpu-features", "avx3"], "unknown CPU feature 'avx3'"),
    (["explain", "--device", "cpu", "--arch", "gfx942"], "--arch applies to device cuda"),
])
def test_cli_bad_environment_is_one_line_and_status_2(args, message):
    out = mixboard(*args)
    assert out.returncode == 2 and message in out.stderr and out.stderr.count("\n") == 1, out.stderr


def test_explain_and_select_take_the_new_flags():
    out = mixboard("explain", "--arch", "gfx942", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["environment"]["arch"] == "gfx942"
    out = mixboard("select", "attention", "--device", "cpu", "--cpu-features", "amx", "--json")
    assert json.loads(out.stdout)["environment"]["cpu_features"] == ["avx2", "avx512", "amx"]
    out = mixboard("backends", "--help")
    assert "--arch NAME" in out.stdout and "gfx942" in out.stdout and "--cpu-features" in out.stdout
