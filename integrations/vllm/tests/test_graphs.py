"""Graphs without an engine (vLLM's CPU build captures none): the capture level a plan's backends
declare, vLLM told NEVER, and the splitting ops where vLLM captures piecewise CUDA graphs."""

from types import SimpleNamespace

import pytest
from vllm.config.compilation import CompilationConfig, CompilationMode, CUDAGraphMode
from vllm.v1.attention.backend import AttentionCGSupport

from mixboard import AttentionSpec, Mamba2Spec, get_registry
from mixboard.capture import NEVER, UNIFORM_DECODE
from mixboard_vllm import graphs, ops
from mixboard_vllm.attention import MixboardAttentionBuilder
from mixboard_vllm.errors import StartupError
from mixboard_vllm.slots import MixboardSlotsBuilder

ATTN = ("model.layers.0.self_attn.attn", "attention", AttentionSpec(num_heads=4, num_kv_heads=2, head_size=32))
MAMBA2 = ("model.layers.1.mixer", "mamba2", Mamba2Spec(num_heads=8, head_dim=32, d_state=16))


def test_the_level_is_the_weakest_declaration_of_the_planned_backends():
    registry = get_registry()
    assert registry.backends["sdpa_cpu"].cls.capture == UNIFORM_DECODE  # what they declare today
    assert registry.backends["mamba2_torch"].cls.capture == NEVER
    assert graphs.planned_level(registry.plan([ATTN], overrides="attention=sdpa_cpu")) == UNIFORM_DECODE
    assert graphs.planned_level(registry.plan([ATTN, MAMBA2], overrides="attention=sdpa_cpu,mamba2=mamba2_torch")) \
        == NEVER
    split = registry.plan([ATTN], overrides="attention@prefill=sdpa,attention@decode=sdpa_cpu")  # sdpa: never
    assert graphs.planned_level(split) == NEVER


def test_vllm_is_told_never():
    for builder in (MixboardAttentionBuilder, MixboardSlotsBuilder):
        assert builder.get_cudagraph_support(None, None) is AttentionCGSupport.NEVER


def config(mode, cudagraph_mode, splitting_ops):
    cc = CompilationConfig(mode=mode, cudagraph_mode=cudagraph_mode, splitting_ops=splitting_ops)
    return SimpleNamespace(compilation_config=cc)


def test_mixboards_ops_must_split_piecewise_graphs():
    attention, mixer = "vllm::unified_attention_with_output", ops.QUALIFIED
    piecewise = CompilationMode.VLLM_COMPILE
    ops.check_graph_splits(config(piecewise, CUDAGraphMode.PIECEWISE, [attention, mixer]), {"attention", "mamba2"})
    ops.check_graph_splits(config(piecewise, CUDAGraphMode.PIECEWISE, [attention]), {"attention"})
    # full graphs alone, or none: vLLM's to resolve with the builders' NEVER
    ops.check_graph_splits(config(piecewise, CUDAGraphMode.FULL, []), {"attention", "mamba2"})
    ops.check_graph_splits(config(CompilationMode.DYNAMO_TRACE_ONCE, CUDAGraphMode.NONE, []), {"mamba2"})
    with pytest.raises(StartupError, match=r"add mixboard_vllm::mixer to compilation_config.splitting_ops"):
        ops.check_graph_splits(config(piecewise, CUDAGraphMode.FULL_AND_PIECEWISE, [attention]), {"attention", "mamba2"})
    with pytest.raises(StartupError, match=r"add mixboard_vllm::mixer and vllm::unified_attention_with_output"):
        ops.check_graph_splits(config(piecewise, CUDAGraphMode.PIECEWISE, ["vllm::other"]), {"attention", "short_conv"})


def test_the_op_is_registered_once_per_process():
    import torch

    ops.register()
    ops.register()  # vLLM may load its general plugins more than once in a process
    assert hasattr(torch.ops.mixboard_vllm, "mixer")
