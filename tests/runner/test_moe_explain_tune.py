"""Kind ``moe`` through what explains and tunes a model: the plan (``mixboard
explain``'s JSON) names each moe layer's backend and the rejected ones with
their reasons, ``mixboard select moe`` resolves one, and ``tune`` measures
both backends of a moe group (the kit's adapter feeds it) and picks one.
No model of the runner has moe layers yet: a model shell declaring them
stands in for one."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mixboard import MoESpec, get_registry, simulate
from mixboard_cpu.compiled import PANELS, kernel_unusable
from mixboard_runner import loader
from mixboard_runner.measure import Shape
from mixboard_runner.run_commands import explain_dict
from mixboard_runner.tune import tune

pytestmark = pytest.mark.skipif(bool(kernel_unusable(PANELS)), reason=f"{PANELS} is not built")
SPEC = MoESpec(hidden_size=64, num_experts=8, top_k=2, intermediate_size=32)
LAYERS = [(f"model.layers.{i}.mlp.experts", "moe", SPEC) for i in range(2)]
HALF = ("model.layers.2.mlp.experts", "moe", MoESpec(**{**SPEC.to_dict(), "dtype": "bfloat16"}))


def test_explain_names_each_moe_layers_backend_and_the_rejected_ones():
    plan = explain_dict(get_registry().plan([*LAYERS, HALF], simulate("cpu")))
    by_name = {layer["name"]: layer for layer in plan["layers"]}
    first = by_name["model.layers.0.mlp.experts"]
    assert (first["kind"], first["backend"]) == ("moe", "moe_cpu")
    assert first["rejected"]["moe_torch"] == ["available, but 'moe_cpu' has higher priority (20 > 10)"]
    half = by_name["model.layers.2.mlp.experts"]
    assert half["backend"] == "moe_torch"
    assert half["rejected"]["moe_cpu"] == ["supports dtypes float32; the layer is bfloat16"]
    assert {(g["kind"], g["backend"], len(g["layers"])) for g in plan["groups"]} == {("moe", "moe_cpu", 2),
                                                                                       ("moe", "moe_torch", 1)}


def test_select_resolves_a_moe_layer_from_the_command_line():
    done = subprocess.run([sys.executable, "-m", "mixboard_runner", "select", "moe", "--spec",
                           "num_experts=16,top_k=4,gating=topk_softmax", "--json"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["chosen"] == "moe_cpu" and out["spec"]["gating"] == "topk_softmax"


class _MoEShell:
    def layer_decls(self):
        return LAYERS


def test_tune_measures_both_backends_of_a_moe_group(monkeypatch):
    monkeypatch.setattr(loader, "build_model", lambda path, dtype: _MoEShell())
    _, _, _, groups = tune("unused", "float32", "cpu", Shape(8, 2, 4, 16), 0.02, None)
    (group,) = groups
    assert group.kind == "moe" and len(group.layers) == 2
    assert set(group.times) == {"moe_cpu", "moe_torch"}, group.errors
    assert all(set(phases) == {"prefill", "decode"} for phases in group.times.values())
    assert set(group.winner) <= {"moe_cpu", "moe_torch"}
