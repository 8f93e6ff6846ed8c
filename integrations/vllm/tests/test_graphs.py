"""Graphs without an engine (vLLM's CPU build captures none): the capture level a plan's backends
declare and the splitting ops where vLLM captures piecewise CUDA graphs. What vLLM is told, and
the steps it replays from full graphs: test_replay.py."""

from types import SimpleNamespace

import pytest
from vllm.config.compilation import CompilationConfig, CompilationMode, CUDAGraphMode

from mixboard import AttentionSpec, Mamba2Spec, get_registry
from mixboard.capture import NEVER, UNIFORM_DECODE
from mixboard_vllm import graphs, ops
from mixboard_vllm.errors import StartupError

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


def config(mode, cudagraph_mode, splitting_ops):
    cc = CompilationConfig(mode=mode, cudagraph_mode=cudagraph_mode, splitting_ops=splitting_ops)
    return SimpleNamespace(compilation_config=cc)


def test_mixboards_ops_must_split_piecewise_graphs():
    attention, mixer = "vllm::unified_attention_with_output", ops.QUALIFIED
    piecewise = CompilationMode.VLLM_COMPILE
    ops.check_graph_splits(config(piecewise, CUDAGraphMode.PIECEWISE, [attention, mixer]), {"attention", "mamba2"})
    ops.check_graph_splits(config(piecewise, CUDAGraphMode.PIECEWISE, [attention]), {"attention"})
    # full graphs alone, or none: vLLM's to resolve with what the builders support
    ops.check_graph_splits(config(piecewise, CUDAGraphMode.FULL, []), {"attention", "mamba2"})
    ops.check_graph_splits(config(CompilationMode.DYNAMO_TRACE_ONCE, CUDAGraphMode.NONE, []), {"mamba2"})
    with pytest.raises(StartupError, match=r"add mixboard_vllm::mixer to compilation_config.splitting_ops"):
        ops.check_graph_splits(config(piecewise, CUDAGraphMode.FULL_AND_PIECEWISE, [attention]), {"attention", "mamba2"})
    with pytest.raises(StartupError, match=r"add mixboard_vllm::mixer and vllm::unified_attention_with_output"):
        ops.check_graph_splits(config(piecewise, CUDAGraphMode.PIECEWISE, ["vllm::other"]), {"attention", "short_conv"})


def test_full_graphs_turn_piecewise_only_where_mixboards_op_splits_them():
    """vLLM resolves FULL, for builders that support less than ALWAYS (mixboard's always do), to
    FULL_AND_PIECEWISE only where the splitting ops hold all of its attention ops, and those
    include mixboard's once the integration is loaded (compat.split_graph_at); else to
    FULL_DECODE_ONLY, no piecewise graph. So a user's FULL never puts the mixer op in a piecewise
    graph, though check_graph_splits lets FULL through."""
    from mixboard_vllm import compat

    compat.split_graph_at(ops.QUALIFIED)  # what the integration's register() does in every process
    everything = list(CompilationConfig._attention_ops)  # vLLM's own list, which the user's must hold
    assert ops.QUALIFIED in everything
    without = [op for op in everything if op != ops.QUALIFIED]

    def splits_piecewise(splitting_ops):
        cc = config(CompilationMode.VLLM_COMPILE, CUDAGraphMode.FULL, splitting_ops).compilation_config
        return cc.splitting_ops_contain_attention()

    assert splits_piecewise(everything) and not splits_piecewise(without)


def test_the_op_is_registered_once_per_process():
    import torch

    ops.register()
    ops.register()  # vLLM may load its general plugins more than once in a process
    assert hasattr(torch.ops.mixboard_vllm, "mixer")
