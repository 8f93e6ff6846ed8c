"""How mixboard-cpu's backends are chosen: on CPU in float32 over the
portable ``*_torch`` ones (C kernels 20, oneDNN 15, torch 10); in bfloat16,
on another device, or for an untied table, the torch ones, with the reasons
``mixboard backends`` shows."""

from __future__ import annotations

import pytest

from mixboard import (ArgmaxSpec, EmbeddingSpec, LinearSpec, MoESpec, Registry, RMSNormSpec, RotarySpec, simulate)
from mixboard.plugins import load
from mixboard_cpu.compiled import PANELS, ROWS, kernel_unusable

pytestmark = pytest.mark.skipif(bool(kernel_unusable(PANELS) or kernel_unusable(ROWS)),
                                reason="mixboard-cpu's kernels are not built")
SPECS = {"linear": LinearSpec(), "rms_norm": RMSNormSpec(), "rotary": RotarySpec(),
         "embedding": EmbeddingSpec(tied=True), "argmax": ArgmaxSpec(), "moe": MoESpec()}
WINNERS = {"linear": "linear_cpu", "rms_norm": "rms_norm_cpu", "rotary": "rotary_cpu", "embedding": "embedding_cpu",
           "argmax": "argmax_cpu", "moe": "moe_cpu"}


@pytest.fixture(scope="module")
def registry():
    return Registry(load())


@pytest.mark.parametrize("kind", list(SPECS))
def test_the_c_kernels_win_on_cpu_in_float32(registry, kind):
    assert registry.select(kind, SPECS[kind], simulate("cpu")).chosen.name == WINNERS[kind]


@pytest.mark.parametrize("kind", list(SPECS))
def test_bfloat16_goes_to_the_torch_backends_saying_why(registry, kind):
    spec = type(SPECS[kind])(**{**SPECS[kind].to_dict(), "dtype": "bfloat16"})
    selection = registry.select(kind, spec, simulate("cpu"))
    assert selection.chosen.name == f"{kind}_torch"
    for name in (WINNERS[kind], f"{kind}_onednn"):
        if name in selection.rejected:
            assert "supports dtypes float32; the layer is bfloat16" in selection.rejected[name]


def test_on_cuda_the_torch_backends_serve(registry):
    selection = registry.select("linear", LinearSpec(), simulate("cuda", "9.0"))
    assert selection.chosen.name == "linear_torch"
    assert any("runs on cpu" in r for r in selection.rejected["linear_cpu"])


def test_an_untied_table_goes_to_embedding_torch_saying_why(registry):
    selection = registry.select("embedding", EmbeddingSpec(tied=False), simulate("cpu"))
    assert selection.chosen.name == "embedding_torch"
    for name in ("embedding_cpu", "embedding_onednn"):
        (reason,) = selection.rejected[name]
        assert reason.startswith("an untied table is only looked up") and "embedding_torch serves it" in reason


def test_forcing_linear_onednn_over_the_panels(registry):
    from mixboard.overrides import Overrides

    forced = Overrides.parse("linear=linear_onednn")
    assert registry.select("linear", LinearSpec(), simulate("cpu"), overrides=forced).chosen.name == "linear_onednn"
