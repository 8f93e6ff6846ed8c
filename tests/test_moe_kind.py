"""Kind ``moe``: its spec's errors, its oracle's rules (ties, gating, experts
with no rows), ``moe_torch`` against the oracle and against the MoE blocks of
transformers with their own weights handed over as loaded, and the kit
failing a backend that breaks ties the other way."""

from __future__ import annotations

import pytest
import torch

from mixboard import MoESpec, MoEWeights, simulate
from mixboard.testing import MoEOracle
from mixboard.testing.conformance import OP_ADAPTERS, run_suite
from mixboard.testing.conformance.op_kinds import TIED
from mixboard.torch_ops.backends import MoETorch
from mixboard.torch_ops.moe import MoETorchImpl

CPU = simulate("cpu")


def weights(spec, seed=0, router=None):
    g = torch.Generator().manual_seed(seed)
    e, h, i = spec.num_experts, spec.hidden_size, spec.intermediate_size
    return MoEWeights(
        router=torch.randn(e, h, generator=g) * h ** -0.5 if router is None else router,
        router_bias=torch.randn(e, generator=g) if spec.router_bias else None,
        selection_bias=torch.randn(e, generator=g) * 0.1 if spec.selection_bias else None,
        gate_up=torch.randn(e, spec.up_rows, h, generator=g) * h ** -0.5,
        down=torch.randn(e, h, i, generator=g) * i ** -0.5)


def both(spec, w):
    impl = MoETorch.make_impl(spec, CPU)
    impl.load(w)
    ref = MoEOracle(spec)
    ref.load(w)
    return impl, ref


@pytest.mark.parametrize("fields, message", [
    (dict(top_k=0), "top_k must be between 1 and num_experts"),
    (dict(top_k=9), r"top_k must be between 1 and num_experts \(8\), not 9"),
    (dict(num_experts=0, top_k=0), "num_experts must be positive"),
    (dict(activation="gelu"), "activation must be one of silu, relu2, not 'gelu'"),
    (dict(gating="softmax"), "gating must be one of softmax_topk, topk_softmax, sigmoid_topk"),
    (dict(routed_scaling=0.0), "routed_scaling must be positive"),
    (dict(intermediate_size=0), "hidden_size and intermediate_size must be positive"),
])
def test_a_bad_spec_is_one_clear_line(fields, message):
    with pytest.raises(ValueError, match=message):
        MoESpec(**fields)


def test_spec_from_the_command_line_and_the_rows_of_the_first_product():
    spec = MoESpec.from_strings({"gating": "sigmoid_topk", "activation": "relu2", "routed_scaling": "2.5",
                                 "normalize_topk": "true", "top_k": "6", "num_experts": "64"})
    assert (spec.gating, spec.routed_scaling, spec.normalize_topk, spec.top_k) == ("sigmoid_topk", 2.5, True, 6)
    assert spec.up_rows == spec.intermediate_size and MoESpec(intermediate_size=7).up_rows == 14


def expert_output(spec, w, e, x):
    h = x.double() @ w.gate_up[e].double().T
    if spec.gated:
        g, u = h.split(spec.intermediate_size, -1)
        h = torch.nn.functional.silu(g) * u
    else:
        h = torch.relu(h) ** 2
    return h @ w.down[e].double().T


@pytest.mark.parametrize("gating", ["softmax_topk", "topk_softmax", "sigmoid_topk"])
@pytest.mark.parametrize("top_k", [1, 3])
def test_equal_logits_choose_the_lowest_expert_indices(gating, top_k):
    spec = MoESpec(hidden_size=16, num_experts=6, top_k=top_k, intermediate_size=8, gating=gating)
    w = weights(spec, router=torch.zeros(6, 16))  # every logit 0: all six tie
    x = torch.randn(5, 16, generator=torch.Generator().manual_seed(top_k))
    want = sum(expert_output(spec, w, e, x) for e in range(top_k))
    scale = {"softmax_topk": 1 / 6, "topk_softmax": 1 / top_k, "sigmoid_topk": 0.5}[gating]
    for impl in both(spec, w):
        torch.testing.assert_close(impl.forward(x).double(), scale * want, atol=1e-5, rtol=1e-5)


def test_each_gating_weighs_the_chosen_experts_as_defined():
    spec = MoESpec(hidden_size=8, num_experts=4, top_k=2, intermediate_size=4)
    router = torch.zeros(4, 8)
    router[:, 0] = torch.tensor([1.0, 3.0, 0.0, 2.0])  # x = e0: logits 1, 3, 0, 2: experts 1 then 3
    x = torch.eye(8)[:1]
    logits = torch.tensor([1.0, 3.0, 0.0, 2.0], dtype=torch.float64)
    outs = {e: expert_output(spec, weights(spec, router=router), e, x) for e in (1, 3)}
    cases = [
        (dict(), logits.softmax(-1)[[1, 3]]),
        (dict(normalize_topk=True), logits.softmax(-1)[[1, 3]] / logits.softmax(-1)[[1, 3]].sum()),
        (dict(gating="topk_softmax"), logits[[1, 3]].softmax(-1)),
        (dict(gating="sigmoid_topk", routed_scaling=2.5), logits.sigmoid()[[1, 3]] * 2.5),
    ]
    for fields, (w1, w3) in cases:
        s = MoESpec(**{**spec.to_dict(), **fields})
        for impl in both(s, weights(s, router=router)):
            torch.testing.assert_close(impl.forward(x).double(), w1 * outs[1] + w3 * outs[3], atol=1e-6, rtol=1e-5)


def test_the_selection_bias_chooses_but_does_not_weigh():
    spec = MoESpec(hidden_size=8, num_experts=4, top_k=1, intermediate_size=4, gating="sigmoid_topk",
                   selection_bias=True)
    router = torch.zeros(4, 8)
    router[:, 0] = torch.tensor([1.0, 3.0, 0.0, 2.0])
    w = weights(spec, router=router)
    w.selection_bias = torch.tensor([0.0, 0.0, 0.0, 0.5])  # sigmoid(2) + 0.5 > sigmoid(3): expert 3
    x = torch.eye(8)[:1]
    want = torch.tensor(2.0).sigmoid().double() * expert_output(spec, w, 3, x)
    for impl in both(spec, w):
        torch.testing.assert_close(impl.forward(x).double(), want, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("fields", [
    dict(), dict(top_k=1), dict(top_k=8, normalize_topk=True), dict(gating="topk_softmax", router_bias=True),
    dict(gating="sigmoid_topk", activation="relu2", normalize_topk=True, routed_scaling=2.5, selection_bias=True),
])
@pytest.mark.parametrize("rows", [1, 3, 64])
def test_moe_torch_matches_the_oracle_with_most_experts_idle_or_all_busy(fields, rows):
    spec = MoESpec(hidden_size=32, num_experts=8, intermediate_size=24, **{"top_k": 2, **fields})
    impl, ref = both(spec, weights(spec, seed=rows))
    x = torch.randn(rows, 32, generator=torch.Generator().manual_seed(rows))
    torch.testing.assert_close(impl.forward(x), ref.forward(x), atol=1e-5, rtol=1e-5)


def test_one_expert_with_every_row_and_the_rest_with_none():
    spec = MoESpec(hidden_size=16, num_experts=8, top_k=1, intermediate_size=8, router_bias=True)
    w = weights(spec)
    w.router_bias = torch.full((8,), -50.0)
    w.router_bias[5] = 50.0
    x = torch.randn(40, 16, generator=torch.Generator().manual_seed(0))
    impl, ref = both(spec, w)
    torch.testing.assert_close(impl.forward(x), ref.forward(x), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(impl.forward(x).double(), expert_output(spec, w, 5, x), atol=1e-5, rtol=1e-5)


def test_the_kits_inputs_put_tied_experts_at_the_k_th_place():
    """The kit's router rows TIED are equal and its logits exact: some rows of its cases must have the two
    straddle the k-th place, or no case would tell a backend that breaks ties the other way."""
    adapter = OP_ADAPTERS["moe"]
    spec = MoESpec(**adapter.base)
    g = torch.Generator().manual_seed(1)
    w = adapter.weights(spec, g)
    x = adapter.calls[0].draw(spec, 37, g, 0)["x"]
    logits = x.double() @ w.router.double().T
    assert torch.equal(logits[:, TIED[0]], logits[:, TIED[1]])
    ranks = logits.argsort(dim=-1, descending=True, stable=True).argsort(dim=-1)
    assert int(((ranks[:, TIED[0]] == spec.top_k - 1) & (ranks[:, TIED[1]] == spec.top_k)).sum()) >= 2


class _HighestOnTies(MoETorchImpl):
    def route(self, x, logits=None):  # the higher expert index first among equals: wrong
        experts, weights = super().route(x, logits)
        logits = torch.nn.functional.linear(x.float(), self.router, self.router_bias).flip(-1)
        flipped = logits.sort(dim=-1, descending=True, stable=True).indices[:, :self.spec.top_k]
        return self.spec.num_experts - 1 - flipped, weights


class HighestOnTies(MoETorch):
    name = "moe_highest_on_ties"

    @classmethod
    def make_impl(cls, spec, env):
        return _HighestOnTies(spec)


def test_the_kit_fails_a_backend_that_breaks_ties_the_other_way():
    report = run_suite(HighestOnTies, "cpu", ("float32",))
    failed = [r for r in report.results if r.status == "fail"]
    assert any(r.case == "rows[float32]" for r in failed), [(r.case, r.status) for r in report.results]


def test_the_callers_logits_tie_where_they_decide():
    """With logits_input the kit draws the logits: experts 1 and 2 equal in every row, straddling the
    k-th place in some."""
    adapter = OP_ADAPTERS["moe"]
    spec = MoESpec(**adapter.base, logits_input=True)
    call, = adapter.calls_of(spec)
    logits = call.draw(spec, 37, torch.Generator().manual_seed(1), 0)["logits"]
    assert logits.dtype == torch.float32 and torch.equal(logits[:, TIED[0]], logits[:, TIED[1]])
    ranks = logits.argsort(dim=-1, descending=True, stable=True).argsort(dim=-1)
    assert int(((ranks[:, TIED[0]] == spec.top_k - 1) & (ranks[:, TIED[1]] == spec.top_k)).sum()) >= 2


class _OwnRouter(MoETorchImpl):
    def route(self, x, logits=None):  # the caller's logits ignored: a router of its own (wrong)
        if logits is not None:
            logits = logits.flip(-1)
        return super().route(x, logits)


class OwnRouter(MoETorch):
    name = "moe_own_router"

    @classmethod
    def make_impl(cls, spec, env):
        return _OwnRouter(spec)


def test_the_kit_fails_a_backend_that_misreads_the_callers_logits():
    report = run_suite(OwnRouter, "cpu", ("float32",))
    failed = {r.case for r in report.results if r.status == "fail"}
    assert {"shape-logits_sigmoid[float32]", "shape-logits_softmax[float32]"} <= failed, failed
    assert "rows[float32]" not in failed


def test_a_logits_input_layer_called_without_logits_says_so():
    spec = MoESpec(**OP_ADAPTERS["moe"].base, logits_input=True)
    impl = MoETorchImpl(spec)
    impl.load(OP_ADAPTERS["moe"].weights(spec, torch.Generator().manual_seed(0)))
    with pytest.raises(ValueError, match="takes the router logits"):
        impl.forward(torch.zeros(2, spec.hidden_size, dtype=torch.float64))


def test_logits_input_leaves_the_router_bias_to_the_caller():
    with pytest.raises(Exception, match="router_bias"):
        MoESpec(logits_input=True, router_bias=True)


transformers = pytest.importorskip("transformers")


def hf_block(module, config):
    torch.manual_seed(0)
    block = module(config)
    for p in block.parameters():
        torch.nn.init.normal_(p, std=0.2)
    for name, b in block.named_buffers():
        if "bias" in name:
            b.normal_(std=0.05)
    return block


def _run(block, x):
    out = block(x)
    return (out[0] if isinstance(out, tuple) else out)[0]


@torch.no_grad()
def test_the_layout_is_transformers_own():
    """The weights record takes transformers' 3-D expert tensors as they are (no transposes, no splits)."""
    from transformers import GraniteMoeHybridConfig, MixtralConfig, NemotronHConfig
    from transformers.models.granitemoehybrid.modeling_granitemoehybrid import GraniteMoeHybridMoE
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock
    from transformers.models.nemotron_h.modeling_nemotron_h import NemotronHMoE

    h, i, e, k = 64, 16, 8, 2
    x = torch.randn(1, 11, h, generator=torch.Generator().manual_seed(0))
    base = dict(hidden_size=h, intermediate_size=i, num_experts=e, top_k=k)

    mixtral = hf_block(MixtralSparseMoeBlock, MixtralConfig(hidden_size=h, intermediate_size=i, num_local_experts=e,
                                                             num_experts_per_tok=k))
    w = MoEWeights(router=mixtral.gate.weight, router_bias=None, selection_bias=None,
                   gate_up=mixtral.experts.gate_up_proj, down=mixtral.experts.down_proj)
    granite = hf_block(GraniteMoeHybridMoE, GraniteMoeHybridConfig(
        hidden_size=h, intermediate_size=i, num_local_experts=e, num_experts_per_tok=k, mamba_n_heads=8))
    wg = MoEWeights(router=granite.router.weight, router_bias=None, selection_bias=None,
                    gate_up=granite.experts.gate_up_proj, down=granite.experts.down_proj)
    nemotron = hf_block(NemotronHMoE, NemotronHConfig(
        hidden_size=h, moe_intermediate_size=i, n_routed_experts=e, num_experts_per_tok=k, routed_scaling_factor=2.5,
        moe_shared_expert_intermediate_size=8))
    wn = MoEWeights(router=nemotron.gate.weight, router_bias=None, selection_bias=nemotron.gate.e_score_correction_bias,
                    gate_up=nemotron.experts.up_proj, down=nemotron.experts.down_proj)
    cases = [
        (MoESpec(**base, normalize_topk=True), w, _run(mixtral, x)),
        (MoESpec(**base, gating="topk_softmax"), wg, _run(granite, x)),
        (MoESpec(**base, gating="sigmoid_topk", activation="relu2", normalize_topk=True, routed_scaling=2.5,
                 selection_bias=True), wn, _run(nemotron, x) - nemotron.shared_experts(x)[0]),
    ]
    for spec, record, want in cases:
        for impl in both(spec, record):
            torch.testing.assert_close(impl.forward(x[0]), want, atol=2e-5, rtol=2e-5)
