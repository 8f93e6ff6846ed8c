"""gdn_fla without a GPU: declared, listed, and refused with reasons that say what to do; never an
import error. Its kernels themselves run in the Triton-interpreter lane (tests/triton_interp, ci.sh:
fla-core lives only in .venv-triton)."""

from __future__ import annotations

import subprocess
import sys

from mixboard import Registry, get_registry, simulate
from mixboard.selection import module_missing
from mixboard_gdn.fla_backend import GdnFla
from mixboard_gdn.kind import GATED_DELTA_NET, GatedDeltaNetSpec
from mixboard_gdn.torch_backend import GdnTorch

H100 = simulate("cuda", "9.0")


def registry():
    return Registry.from_backends([GdnTorch, GdnFla], kinds=[GATED_DELTA_NET])


def test_registered_by_the_plugin():
    entry = get_registry().backends["gdn_fla"]
    assert entry.cls is GdnFla and entry.distribution == "mixboard-gdn"


def test_refused_on_cpu_with_reasons_that_say_what_to_do(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    module_missing.cache_clear()
    selection = registry().select("gated_delta_net", GatedDeltaNetSpec(), simulate("cpu"))
    assert selection.chosen.name == "gdn_torch"
    reasons = selection.rejected["gdn_fla"]
    assert reasons[-1].startswith("runs on cpu only under Triton's interpreter (TRITON_INTERPRET=1)")
    if module_missing("fla"):
        assert any("'fla'" in r and "not installed" in r and "mixboard-gdn[fla]" in r for r in reasons)


def test_the_gpu_limits_it_checks():
    spec = GatedDeltaNetSpec()
    assert GdnFla.check(spec, H100) == []
    assert GdnFla.check(GatedDeltaNetSpec(head_k_dim=512), H100) == [
        "fla's chunked kernel keeps the state in 64-row blocks of at most 256 key dims; head_k_dim is 512"]
    assert "bfloat16 needs compute capability 8.0" in GdnFla.check(GatedDeltaNetSpec(dtype="bfloat16"),
                                                                   simulate("cuda", "7.5"))[0]


def test_interpreter_is_float32_only(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert GdnFla.check(GatedDeltaNetSpec(), simulate("cpu")) == []
    assert GdnFla.check(GatedDeltaNetSpec(dtype="bfloat16"), simulate("cpu")) == [
        "Triton's interpreter (TRITON_INTERPRET=1) gives wrong bfloat16 results; float32 only there"]


def test_listing_and_explaining_import_no_fla():
    """The declarations import neither torch's kernels nor fla: listing works where fla is absent."""
    code = ("import sys, mixboard_gdn.plugin; assert 'fla' not in sys.modules and 'triton' not in sys.modules; "
            "print('ok')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
