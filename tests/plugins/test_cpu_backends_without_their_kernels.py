"""Where a ``*_cpu`` backend's compiled kernel is not built (no gcc at install:
each plugin's setup.py builds it optionally), the backend is listed with that
reason and selection falls back to the portable backend: never silently."""

from __future__ import annotations

import importlib.util

import pytest

from mixboard import (ArgmaxSpec, AttentionSpec, EmbeddingSpec, LinearSpec, Mamba1Spec, Mamba2Spec, MoESpec,
                      Registry, RMSNormSpec, RotarySpec, ShortConvSpec, simulate)
from mixboard.plugins import load

CASES = [  # (backend module, its compiled module, kind, spec, the portable backend that serves instead)
    ("mixboard_sdpa.cpu_backend", "mixboard_sdpa._paged_decode", "attention",
     AttentionSpec(num_heads=8, num_kv_heads=2, head_size=64), "sdpa"),
    ("mixboard_mamba1.cpu_backend", "mixboard_mamba1._decode_step", "mamba1",
     Mamba1Spec(d_inner=64, d_state=16, d_conv=4, dt_rank=4), "mamba1_torch"),
    ("mixboard_mamba2.cpu_backend", "mixboard_mamba2._prefill", "mamba2", Mamba2Spec(), "mamba2_torch"),
    ("mixboard_shortconv.cpu_backend", "mixboard_shortconv._gated_conv", "short_conv", ShortConvSpec(),
     "short_conv_torch"),
    # mixboard-cpu: the products fall back to oneDNN's (pure Python), the row operations to torch's
    ("mixboard_cpu.compiled", "mixboard_cpu._panels", "linear", LinearSpec(), "linear_onednn"),
    ("mixboard_cpu.compiled", "mixboard_cpu._panels", "embedding", EmbeddingSpec(tied=True), "embedding_onednn"),
    ("mixboard_cpu.compiled", "mixboard_cpu._rows", "rms_norm", RMSNormSpec(), "rms_norm_torch"),
    ("mixboard_cpu.compiled", "mixboard_cpu._rows", "rotary", RotarySpec(), "rotary_torch"),
    ("mixboard_cpu.compiled", "mixboard_cpu._rows", "argmax", ArgmaxSpec(), "argmax_torch"),
    ("mixboard_cpu.compiled", "mixboard_cpu._panels", "moe", MoESpec(), "moe_torch"),
]


@pytest.mark.parametrize("backend_module, compiled, kind, spec, portable", CASES)
def test_a_missing_kernel_is_a_listed_reason_and_the_portable_backend_serves(monkeypatch, backend_module, compiled,
                                                                             kind, spec, portable):
    module = importlib.import_module(backend_module)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == compiled else real(name, *a))
    module.kernel_missing.cache_clear()
    try:
        selection = Registry(load()).select(kind, spec, simulate("cpu"))
        assert selection.chosen.name == portable
        (reasons,) = [r for name, r in selection.rejected.items() if name.endswith("_cpu")]
        assert any(f"its compiled kernel {compiled} is not built" in r and "gcc" in r for r in reasons), reasons
    finally:
        monkeypatch.undo()
        module.kernel_missing.cache_clear()
