"""What the builders tell vLLM about CUDA graphs (graphs.py): the weakest capture declaration of
the planned backends, only with MIXBOARD_VLLM_CUDA_GRAPHS=1, and a recorded step's metadata
refilled in place. No engine: vLLM's CPU build captures nothing, so this is what CPU can check."""

import pytest
import torch
from vllm.v1.attention.backend import AttentionCGSupport

from mixboard import AttentionSpec, Mamba2Spec, get_registry
from mixboard.capture import NEVER, UNIFORM_DECODE
from mixboard_vllm import compat, graphs
from mixboard_vllm.batch import StepMeta
from mixboard_vllm.errors import StartupError

ATTN = ("model.layers.0.self_attn.attn", "attention", AttentionSpec(num_heads=4, num_kv_heads=2, head_size=32))
MAMBA2 = ("model.layers.1.mixer", "mamba2", Mamba2Spec(num_heads=8, head_dim=32, d_state=16))


def plan(layers, rules):
    return get_registry().plan(layers, overrides=rules)


def test_the_level_is_the_weakest_declaration_of_the_planned_backends(monkeypatch):
    registry = get_registry()
    assert registry.backends["sdpa_cpu"].cls.capture == UNIFORM_DECODE  # what sdpa_cpu declares today
    assert registry.backends["mamba2_torch"].cls.capture == NEVER
    attention_only = plan([ATTN], "attention=sdpa_cpu")
    hybrid = plan([ATTN, MAMBA2], "attention=sdpa_cpu,mamba2=mamba2_torch")
    split = plan([ATTN], "attention@prefill=sdpa,attention@decode=sdpa_cpu")  # sdpa declares never
    assert graphs.planned_level(attention_only) == UNIFORM_DECODE
    assert graphs.planned_level(hybrid) == NEVER
    assert graphs.planned_level(split) == NEVER
    monkeypatch.delenv(graphs.SWITCH, raising=False)
    assert graphs.reported_level(attention_only) == NEVER  # off by default: unverified on a GPU
    monkeypatch.setenv(graphs.SWITCH, "1")
    assert graphs.reported_level(attention_only) == UNIFORM_DECODE


def test_levels_map_to_vllms_enum():
    assert compat.cudagraph_support("never") is AttentionCGSupport.NEVER
    assert compat.cudagraph_support("uniform_decode") is AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE
    assert compat.cudagraph_support("any") is AttentionCGSupport.ALWAYS


class Common:
    def __init__(self, n, t, slots):
        self.num_seqs, self.num_tokens, self.state_slots = n, t, slots


def step(slots, table):
    return StepMeta(Common(len(slots), len(slots), torch.tensor(slots)), {0: {"table": torch.tensor(table)}})


def test_a_recorded_step_takes_each_new_steps_values_in_place():
    keep = graphs.Persistent()
    first = step([3, 5], [[1, 2], [3, 4]])
    slots, table = first.common.state_slots, first.metas[0]["table"]
    assert keep(first) is first
    again = keep(step([7, 2], [[9, 8], [7, 6]]))
    assert again is first and again.common.state_slots is slots and again.metas[0]["table"] is table
    assert slots.tolist() == [7, 2] and table.tolist() == [[9, 8], [7, 6]]
    other = step([1, 2, 3], [[1], [2], [3]])  # another batch shape: recorded on its own
    assert keep(other) is other
    with pytest.raises(StartupError, match=r"meta\[0\]\['table'\]: shape \[2, 2\] recorded, \[2, 3\] now"):
        keep(step([1, 2], [[1, 2, 3], [4, 5, 6]]))
