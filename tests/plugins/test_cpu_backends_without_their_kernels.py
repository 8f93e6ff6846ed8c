"""Where a ``*_cpu`` backend's compiled kernel is not built (no gcc at install:
each plugin's setup.py builds it optionally), the backend is listed with that
reason and selection falls back to the portable backend: never silently. So
too where it was built before its C source last changed (an editable install
after a pull, not reinstalled): its entry points may no longer match."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os

import pytest

from mixboard import (ArgmaxSpec, AttentionSpec, EmbeddingSpec, LinearSpec, Mamba1Spec, Mamba2Spec, MoESpec,
                      Registry, RMSNormSpec, RotarySpec, ShortConvSpec, simulate)
from mixboard.plugins import load

CASES = [  # (backend module, its compiled module, kind, spec, the portable backend that serves instead)
    ("mixboard_sdpa.cpu_backend", "mixboard_sdpa._paged_decode", "attention",
     AttentionSpec(num_heads=8, num_kv_heads=2, head_size=64), "sdpa"),
    ("mixboard_sdpa.cpu_backend", "mixboard_sdpa._paged_decode_bf16", "attention",
     AttentionSpec(num_heads=8, num_kv_heads=2, head_size=64, dtype="bfloat16"), "sdpa"),
    ("mixboard_mamba1.cpu_backend", "mixboard_mamba1._decode_step", "mamba1",
     Mamba1Spec(d_inner=64, d_state=16, d_conv=4, dt_rank=4), "mamba1_torch"),
    ("mixboard_mamba2.cpu_backend", "mixboard_mamba2._prefill", "mamba2", Mamba2Spec(), "mamba2_torch"),
    ("mixboard_shortconv.cpu_backend", "mixboard_shortconv._gated_conv", "short_conv", ShortConvSpec(),
     "short_conv_torch"),
    ("mixboard_shortconv.cpu_backend", "mixboard_shortconv._gated_conv_bf16", "short_conv",
     ShortConvSpec(dtype="bfloat16"), "short_conv_torch"),
    # mixboard-cpu: the products fall back to oneDNN's (pure Python), the row operations to torch's
    ("mixboard_cpu.compiled", "mixboard_cpu._panels", "linear", LinearSpec(), "linear_onednn"),
    ("mixboard_cpu.compiled", "mixboard_cpu._panels", "embedding", EmbeddingSpec(tied=True), "embedding_onednn"),
    ("mixboard_cpu.compiled", "mixboard_cpu._rows", "rms_norm", RMSNormSpec(), "rms_norm_torch"),
    ("mixboard_cpu.compiled", "mixboard_cpu._rows", "rotary", RotarySpec(), "rotary_torch"),
    ("mixboard_cpu.compiled", "mixboard_cpu._rows", "argmax", ArgmaxSpec(), "argmax_torch"),
    ("mixboard_cpu.compiled", "mixboard_cpu._panels", "moe", MoESpec(), "moe_torch"),
]


def select_finding(monkeypatch, backend_module, compiled, found, kind, spec):
    """Select a backend for ``spec`` where importlib finds ``found`` (a module spec, or None) for the
    kernel ``compiled``: (the chosen backend's name, the reasons given against the *_cpu backend)."""
    module = importlib.import_module(backend_module)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: found if name == compiled else real(name, *a))
    module.kernel_unusable.cache_clear()
    try:
        selection = Registry(load()).select(kind, spec, simulate("cpu"))
    finally:
        monkeypatch.undo()
        module.kernel_unusable.cache_clear()
    reasons = [r for name, against in selection.rejected.items() if name.endswith("_cpu") for r in against]
    return selection.chosen.name, reasons


@pytest.mark.parametrize("backend_module, compiled, kind, spec, portable", CASES)
def test_a_missing_kernel_is_a_listed_reason_and_the_portable_backend_serves(monkeypatch, backend_module, compiled,
                                                                             kind, spec, portable):
    chosen, reasons = select_finding(monkeypatch, backend_module, compiled, None, kind, spec)
    assert chosen == portable
    assert any(f"its compiled kernel {compiled} is not built" in r and "gcc" in r for r in reasons), reasons


@pytest.mark.parametrize("backend_module, compiled, kind, spec, portable", CASES)
def test_a_kernel_built_before_its_source_changed_is_refused_too(monkeypatch, tmp_path, backend_module, compiled,
                                                                 kind, spec, portable):
    # as an editable install is after a pull that changed the C source and no reinstall
    stem = compiled.rpartition(".")[2]
    built, source = tmp_path / f"{stem}.cpython-311-x86_64-linux-gnu.so", tmp_path / f"{stem}.c"
    built.write_bytes(b"")
    source.write_text("/* changed */")
    os.utime(built, (1_000_000, 1_000_000))
    found = importlib.machinery.ModuleSpec(compiled, None, origin=str(built))
    chosen, reasons = select_finding(monkeypatch, backend_module, compiled, found, kind, spec)
    assert chosen == portable
    want = f"its compiled kernel {compiled} was built before its source {stem}.c last changed (reinstall"
    assert any(r.startswith(want) for r in reasons), reasons
    os.utime(source, (1_000, 1_000))  # the build is the newer: it serves
    chosen, _ = select_finding(monkeypatch, backend_module, compiled, found, kind, spec)
    assert chosen.endswith("_cpu")


def test_an_installed_wheel_without_its_source_is_taken_as_built(monkeypatch, tmp_path):
    from mixboard.compiled_kernels import kernel_unusable

    built = tmp_path / "_kernel.cpython-311-x86_64-linux-gnu.so"
    built.write_bytes(b"")
    real = importlib.util.find_spec
    spec = importlib.machinery.ModuleSpec("pkg._kernel", None, origin=str(built))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: spec if name == "pkg._kernel" else real(name, *a))
    assert kernel_unusable("pkg._kernel") is None
    assert kernel_unusable("mixboard_no_such_kernel") == "is not built"


def built_after_its_source_before_an_include(folder, module: str, included: str):
    """In ``folder``: the build of ``module``, its own source older than it and the source it includes
    newer (as after a pull that changed only the included file). Returns (build, own, included) paths."""
    stem = module.rpartition(".")[2]
    paths = folder / f"{stem}.cpython-311-x86_64-linux-gnu.so", folder / f"{stem}.c", folder / included
    for path in paths:
        path.write_bytes(b"")
    os.utime(paths[1], (1_000, 1_000))
    os.utime(paths[0], (1_000_000, 1_000_000))
    return paths


def test_a_build_older_than_a_source_its_source_includes_is_refused(monkeypatch, tmp_path):
    """sdpa_cpu's bfloat16 build is _paged_decode.c included by _paged_decode_bf16.c: a change to
    the included file leaves that build stale too."""
    from mixboard.compiled_kernels import kernel_unusable

    built, own, included = built_after_its_source_before_an_include(tmp_path, "pkg._k_bf16", "_k.c")
    real = importlib.util.find_spec
    spec = importlib.machinery.ModuleSpec("pkg._k_bf16", None, origin=str(built))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: spec if name == "pkg._k_bf16" else real(name, *a))
    assert kernel_unusable("pkg._k_bf16") is None
    assert kernel_unusable("pkg._k_bf16", includes=("_k.c",)) == "was built before its source _k.c last changed"
    own.unlink()  # a source that is not there is not compared; the others still are
    assert kernel_unusable("pkg._k_bf16", includes=("_k.c",)) == "was built before its source _k.c last changed"
    os.utime(included, (1_000, 1_000))
    assert kernel_unusable("pkg._k_bf16", includes=("_k.c",)) is None


def test_a_build_older_than_a_shared_header_its_sources_include_is_refused(monkeypatch, tmp_path):
    """The first-party kernels include the vector and bfloat16 helpers from plugins/include (the
    setup.py files' include_dirs), through the source a bfloat16 build includes too: a pull that
    changes only a header leaves every such build stale."""
    from mixboard.compiled_kernels import kernel_unusable

    package = tmp_path / "plugins" / "p" / "src" / "pkg"
    package.mkdir(parents=True)
    (tmp_path / "plugins" / "include").mkdir()
    header = tmp_path / "plugins" / "include" / "shared.h"
    built = package / "_k_bf16.cpython-311-x86_64-linux-gnu.so"
    own, included = package / "_k_bf16.c", package / "_k.c"
    own.write_text('#include "_k.c"\n')
    included.write_text('#include <stdint.h>\n  #  include"shared.h"\n#include "absent.h"\n#include "sub/../x.h"\n'
                        '#include "/abs.h"\n')
    header.write_text("")
    built.write_bytes(b"")
    for path, when in ((own, 1_000), (included, 1_000), (header, 1_000), (built, 1_000_000)):
        os.utime(path, (when, when))
    real = importlib.util.find_spec
    spec = importlib.machinery.ModuleSpec("pkg._k_bf16", None, origin=str(built))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: spec if name == "pkg._k_bf16" else real(name, *a))
    assert kernel_unusable("pkg._k_bf16") is None
    os.utime(header, (2_000_000, 2_000_000))  # the header changed after the build
    assert kernel_unusable("pkg._k_bf16") == "was built before its source shared.h last changed"
    header.unlink()  # a header the compiler would not find here is not compared
    assert kernel_unusable("pkg._k_bf16") is None


# (backend module, its bfloat16 build, the float32 source that build includes, kind, spec, portable backend)
BFLOAT16_BUILDS = [
    ("mixboard_sdpa.cpu_backend", "mixboard_sdpa._paged_decode_bf16", "_paged_decode.c", "attention",
     AttentionSpec(num_heads=8, num_kv_heads=2, head_size=64, dtype="bfloat16"), "sdpa"),
    ("mixboard_shortconv.cpu_backend", "mixboard_shortconv._gated_conv_bf16", "_gated_conv.c", "short_conv",
     ShortConvSpec(dtype="bfloat16"), "short_conv_torch"),
]


@pytest.mark.parametrize("backend_module, compiled, included, kind, spec, portable", BFLOAT16_BUILDS)
def test_a_bfloat16_build_is_refused_when_the_source_it_includes_changed(monkeypatch, tmp_path, backend_module,
                                                                         compiled, included, kind, spec, portable):
    built, _, _ = built_after_its_source_before_an_include(tmp_path, compiled, included)
    found = importlib.machinery.ModuleSpec(compiled, None, origin=str(built))
    chosen, reasons = select_finding(monkeypatch, backend_module, compiled, found, kind, spec)
    assert chosen == portable
    assert any(f"its compiled kernel {compiled} was built before its source {included} last changed" in r
               for r in reasons), reasons
