"""``moe_cpu`` against the kind's oracle: every expert's weights re-laid as
panels once (the caller's tensors untouched, no second copy kept), each
instruction set the CPU runs, experts with no rows, one expert with them
all, relu2's experts, and moe_torch's code for a layer that is not float32."""

from __future__ import annotations

import pytest
import torch

from mixboard import MoESpec, MoEWeights
from mixboard_cpu.compiled import PANELS, kernel_unusable
from mixboard_cpu.moe_backend import MoECpu
from cpu_ops import loaded, oracle

pytestmark = pytest.mark.skipif(bool(kernel_unusable(PANELS)), reason=f"{PANELS} is not built")


def weights(spec, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    e, h, i = spec.num_experts, spec.hidden_size, spec.intermediate_size
    return MoEWeights(router=(torch.randn(e, h, generator=g) * h ** -0.5).to(dtype),
                      router_bias=torch.randn(e, generator=g).to(dtype) if spec.router_bias else None,
                      selection_bias=(torch.randn(e, generator=g) * 0.1).to(dtype) if spec.selection_bias else None,
                      gate_up=(torch.randn(e, spec.up_rows, h, generator=g) * h ** -0.5).to(dtype),
                      down=(torch.randn(e, h, i, generator=g) * i ** -0.5).to(dtype))


def _isas():
    if kernel_unusable(PANELS):
        return ()
    from mixboard_cpu import _panels

    return _panels.supported()


@pytest.fixture(params=_isas())
def isa(request):
    """Each instruction set the products run here."""
    from mixboard_cpu import _panels

    _panels.use_isa(request.param)
    yield request.param
    _panels.use_isa("")


@pytest.mark.parametrize("fields", [
    dict(), dict(hidden_size=33, intermediate_size=17, num_experts=5, top_k=3),
    dict(gating="sigmoid_topk", activation="relu2", normalize_topk=True, routed_scaling=2.5, selection_bias=True),
    dict(gating="topk_softmax", top_k=8, router_bias=True),
])
@pytest.mark.parametrize("rows", [1, 7, 300])
def test_matches_the_oracle(isa, fields, rows):
    spec = MoESpec(**{**dict(hidden_size=48, num_experts=8, top_k=2, intermediate_size=40), **fields})
    w = weights(spec, seed=rows)
    kept = {name: getattr(w, name).clone() for name in ("router", "gate_up", "down")}
    impl, ref = loaded(MoECpu, spec, w), oracle(spec, w)
    h = spec.hidden_size
    x = torch.randn(rows, h + 5, generator=torch.Generator().manual_seed(rows))[:, 2:2 + h]  # a wider tensor's rows
    torch.testing.assert_close(impl.forward(x), ref.forward(x), atol=1e-5, rtol=1e-5)
    assert all(torch.equal(getattr(w, name), t) for name, t in kept.items())


def test_the_panels_replace_the_experts_weights():
    spec = MoESpec(hidden_size=32, num_experts=4, top_k=2, intermediate_size=20)
    impl = loaded(MoECpu, spec, weights(spec))
    assert impl.gate_up is None and impl.down is None
    assert impl.up_panels.shape == (4, 2 * 2, 32, 16) and impl.down_panels.shape == (4, 2, 20, 16)


def test_one_expert_with_every_row_and_the_rest_with_none():
    spec = MoESpec(hidden_size=32, num_experts=8, top_k=1, intermediate_size=24, router_bias=True)
    w = weights(spec)
    w.router_bias = torch.full((8,), -50.0)
    w.router_bias[6] = 50.0
    impl, ref = loaded(MoECpu, spec, w), oracle(spec, w)
    x = torch.randn(50, 32, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(impl.forward(x), ref.forward(x), atol=1e-5, rtol=1e-5)


def test_a_layer_that_is_not_float32_runs_moe_torchs_code():
    spec = MoESpec(hidden_size=32, num_experts=4, top_k=2, intermediate_size=16, dtype="bfloat16")
    w = weights(spec, dtype=torch.bfloat16)
    impl, ref = loaded(MoECpu, spec, w), oracle(spec, w)
    assert impl.up_panels is None
    x = torch.randn(9, 32, generator=torch.Generator().manual_seed(0)).bfloat16()
    torch.testing.assert_close(impl.forward(x).float(), ref.forward(x).float(), atol=3e-2, rtol=3e-2)
