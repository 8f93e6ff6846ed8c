"""``linear_onednn``'s ``layout`` option, installed and set as users set it:
the impl stores each weight as the option says, every layout passes the
conformance kit (a model's greedy tokens on each: tests/runner/test_backend_options_engine.py)."""

from __future__ import annotations

import pytest
import torch

from mixboard import LinearSpec, LinearWeights, get_registry, simulate
from mixboard.ops.checks import build_impl
from mixboard.testing.conformance import run_suite
from mixboard_cpu import onednn
from mixboard_cpu.declarations import LAYOUTS

CPU = simulate("cpu")
SPEC = LinearSpec(in_features=48, out_features=40)
LAYER = "model.layers.0.mlp.down_proj"


def loaded_impl(options):
    """The impl the plan builds for one linear layer with ``options``, loaded with a weight."""
    registry = get_registry()
    plan = registry.plan([(LAYER, "linear", SPEC)], CPU, overrides="linear=linear_onednn", options=options)
    impl = build_impl(plan.layers[0].selection.backend, SPEC, CPU, LAYER, plan.options.get("linear_onednn"))
    weight = torch.randn(SPEC.out_features, SPEC.in_features, generator=torch.Generator().manual_seed(0))
    impl.load(LinearWeights(weight=weight, bias=None))
    return impl, weight, plan


def test_the_declared_layouts_are_those_the_benchmarks_measure():
    (option,) = get_registry().backends["linear_onednn"].cls.options
    assert (option.name, option.default, option.choices) == ("layout", "packed", LAYOUTS)
    assert LAYOUTS == ("packed", "as_loaded", "column_major")


def test_the_impl_stores_each_weight_as_the_layout_says():
    as_loaded, weight, plan = loaded_impl("linear_onednn.layout=as_loaded")
    assert plan.options == {"linear_onednn": {"layout": "as_loaded"}}
    assert as_loaded.layout == "as_loaded"
    assert as_loaded.weight.data_ptr() == weight.data_ptr()  # the loaded tensor itself: no reorder, no copy

    column, weight, _ = loaded_impl({"linear_onednn": {"layout": "column_major"}})
    assert column.weight.stride() == (1, SPEC.out_features) and torch.equal(column.weight, weight)

    packed, weight, plan = loaded_impl(None)
    assert packed.layout == "packed" and plan.options == {"linear_onednn": {"layout": "packed"}}
    assert packed.weight.is_mkldnn == onednn.usable()  # oneDNN's opaque blocked copy, which only its product reads
    assert not as_loaded.weight.is_mkldnn and not column.weight.is_mkldnn
    x = torch.randn(5, SPEC.in_features, generator=torch.Generator().manual_seed(1))
    want = x @ weight.T
    for impl in (as_loaded, column, packed):
        assert torch.allclose(impl.forward(x), want, atol=1e-5)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_layout_passes_the_conformance_kit(layout):
    report = run_suite("linear_onednn", "cpu", options={"layout": layout})
    assert report.options == {"layout": layout}
    assert report.ok and {r.status for r in report.results} == {"pass"}, [r for r in report.results
                                                                          if r.status != "pass"]
