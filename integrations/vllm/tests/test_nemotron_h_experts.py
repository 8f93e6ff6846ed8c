"""Nemotron-H with expert blocks through vLLM with mixboard, in vLLM's default (compiled) mode.

vLLM 0.32's CPU build refuses the model: its experts are not gated (relu2), and vLLM's FusedMoE
runs those on CUDA, XPU and ROCm only. Through mixboard it runs: the experts on the moe kind
(vLLM's gate, shared expert and routed_scaling_factor stay vLLM's; its router logits go to the
kind, logits_input), Mamba-2 and attention on mixboard too, vLLM's MLPs. One engine, steps that mix
decodes with fresh, chunked and continuing prefills, the two expert layers on two backends
(moe_cpu, and moe_torch by a layer rule): the greedy ids must equal transformers' float32 ones."""

import pytest

from harness import ROW, ok, run
from hf_ids import hf_ids

COMPILED = {"enforce_eager": False}
NO_CPU_MOE = "NotImplementedError: is_act_and_mul=False is supported only for CUDA, XPU and ROCm for now"
TORCH_LAYER = "model.layers.5.mixer.experts"
LAYERS = {"model.layers.0.mixer": ("mamba2", "mamba2_cpu"), "model.layers.2.mixer.attn": ("attention", "sdpa_cpu"),
          "model.layers.4.mixer": ("mamba2", "mamba2_cpu"), "model.layers.1.mixer.experts": ("moe", "moe_cpu"),
          TORCH_LAYER: ("moe", "moe_torch")}


def plan_table(log: str) -> dict[str, tuple[str, str]]:
    """layer -> (kind, backend) of the logged plan, the moe rows too (harness.ROW reads the mixers')."""
    import re

    rows = re.findall(ROW.pattern.replace("gated_delta_net)", "gated_delta_net|moe)"), log)
    return {layer: (kind, backend) for layer, kind, backend, _ in rows}


@pytest.fixture(scope="module")
def experts(workdir, checkpoint):
    path = checkpoint("nemotron_h")
    return path, ok(run(workdir, "nemotron_h_experts_mixboard", path,
                        {"MIXBOARD_BACKEND": f"{TORCH_LAYER}=moe_torch"}, COMPILED))


def test_nemotron_h_with_experts_through_mixboard_equals_transformers(experts):
    path, r = experts
    assert plan_table(r.log) == LAYERS
    assert r.mixed_steps()
    assert "enforce_eager=False" in r.log and "DYNAMO_TRACE_ONCE" in r.log, "vLLM did not compile the model"
    assert r.ids == hf_ids(path)


def test_vllm_alone_refuses_the_experts_on_cpu(workdir, checkpoint):
    """Should vLLM's CPU build gain non-gated experts, this fails: mixboard then leaves them to vLLM
    (layers/moe.py takes over only what vLLM cannot run), and this file compares with vLLM alone."""
    r = run(workdir, "nemotron_h_experts_vllm_alone", checkpoint("nemotron_h"), {"MIXBOARD_VLLM": "0"}, COMPILED)
    assert r.rc != 0 and NO_CPU_MOE in r.log, r.log[-3000:]


def test_lifted_refusal_stays_with_experts_mixboard_does_not_run():
    """The refusal is lifted for every FusedMoEConfig in the process (vLLM raises it as the config is
    made, before the experts' class is known), but only vLLM's RoutedExperts is taken over. The config
    keeps vLLM's refusal: experts of a model's own subclass are refused in vLLM's own words when vLLM
    makes their unquantized method, and the plan names any that another method let through (plan.py)."""
    from types import SimpleNamespace

    import torch
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.config import FusedMoEConfig, FusedMoEParallelConfig, RoutingMethodType

    from mixboard_vllm import compat

    def config(activation):  # vLLM's own FusedMoEConfig, as its factory makes it on this CPU
        return FusedMoEConfig(num_experts=4, experts_per_token=2, hidden_dim=8, intermediate_size=8,
                              num_local_experts=4, num_logical_experts=4, activation=activation, device="cpu",
                              routing_method=RoutingMethodType.Default, in_dtype=torch.float32,
                              moe_parallel_config=FusedMoEParallelConfig.make_no_parallel())

    compat.lift_experts_refusal()
    relu2, silu = config(MoEActivation.RELU2_NO_MUL), config(MoEActivation.SILU)
    assert NO_CPU_MOE.removeprefix("NotImplementedError: ") == relu2.mixboard_lifted_refusal
    assert not hasattr(silu, "mixboard_lifted_refusal")  # vLLM runs gated experts itself: nothing lifted

    class DbrxExperts:  # stands for a model's own RoutedExperts subclass; vLLM's forward context holds runners
        def __init__(self, moe_config, ours=False):
            self.moe_config, self.runs_on_mixboard = moe_config, ours

    context = {"model.layers.0.experts": SimpleNamespace(routed_experts=DbrxExperts(relu2)),
               "model.layers.1.experts": SimpleNamespace(routed_experts=DbrxExperts(relu2, ours=True)),
               "model.layers.2.experts": SimpleNamespace(routed_experts=DbrxExperts(silu)),
               "model.layers.3.self_attn": SimpleNamespace()}
    vllm_config = SimpleNamespace(compilation_config=SimpleNamespace(static_forward_context=context))
    assert list(compat.unclaimed_experts(vllm_config)) == [
        ("model.layers.0.experts", "DbrxExperts", relu2.mixboard_lifted_refusal)]

    # what vLLM gives such experts: its unquantized method, which has no kernel for them here
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import UnquantizedFusedMoEMethod

    with set_current_vllm_config(VllmConfig()):
        with pytest.raises(NotImplementedError) as refusal:
            UnquantizedFusedMoEMethod(relu2)
        assert str(refusal.value) == relu2.mixboard_lifted_refusal  # vLLM's own words, not "no backend..."
