"""Preferences (--prefer, $MIXBOARD_PREFER, Engine(prefer=)): a preferred
backend wins where it can serve, whatever its priority, and is passed over
with its reasons where it cannot; never an error for that, always one for a
typo. Forcing (--backend) beats preferring."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mixboard import AttentionSpec, Backend, Registry, UsageError, get_registry, simulate

CPU = simulate("cpu")
H100 = simulate("cuda", "9.0")


def make(name, priority, devices=("*",), kind="attention"):
    return type(name.title(), (Backend,), dict(name=name, kind=kind, priority=priority, devices=devices,
                                               dtypes=("float32",), api_version=1))


PORTABLE = make("portable", 10)
KERNELS = make("kernels", 20)
VENDOR = make("vendor", -5)  # a vendor that ranks itself below the first-party backends
GPU_ONLY = make("gpu_only", 1, devices=("cuda",))
SSM = make("ssm", 10, kind="mamba2")
LAYERS = [("m.0.attn", "attention", AttentionSpec()), ("m.1.attn", "attention", AttentionSpec()),
          ("m.2.attn", "attention", AttentionSpec(head_size=128))]


def registry():
    return Registry.from_backends([PORTABLE, KERNELS, VENDOR, GPU_ONLY, SSM])


def chosen(plan):
    return {layer.name: (layer.backend, layer.selection.preferred_by) for layer in plan.layers}


def test_a_preferred_backend_wins_where_it_can_serve_whatever_its_priority():
    plan = registry().plan(LAYERS, CPU, prefer="attention=vendor")
    assert chosen(plan) == {n: ("vendor", "attention=vendor") for n, _, _ in LAYERS}
    assert plan.layers[0].rejected["kernels"] == ("available, but rule 'attention=vendor' prefers 'vendor'",)
    assert plan.layers[0].selection.rule is None  # preferred, not forced


def test_a_preferred_backend_that_cannot_serve_is_passed_over_with_its_reasons():
    plan = registry().plan(LAYERS, CPU, prefer="attention=gpu_only")
    assert chosen(plan) == {n: ("kernels", None) for n, _, _ in LAYERS}
    assert plan.layers[0].rejected["gpu_only"] == ("preferred by rule 'attention=gpu_only' but cannot serve it",
                                                   "runs on cuda; this environment is cpu")
    # on a GPU the same preference takes
    assert chosen(registry().plan(LAYERS, H100, prefer="attention=gpu_only"))["m.0.attn"] == ("gpu_only",
                                                                                             "attention=gpu_only")


def test_preferences_are_tried_in_order_and_layer_patterns_come_first():
    plan = registry().plan(LAYERS, CPU, prefer="attention=gpu_only,attention=portable,m.2.*=vendor")
    assert chosen(plan) == {"m.0.attn": ("portable", "attention=portable"),
                            "m.1.attn": ("portable", "attention=portable"),
                            "m.2.attn": ("vendor", "m.2.*=vendor")}


def test_forcing_beats_preferring():
    plan = registry().plan(LAYERS, CPU, overrides="m.0.*=portable", prefer="attention=vendor")
    assert chosen(plan)["m.0.attn"] == ("portable", None) and plan.layers[0].selection.rule == "m.0.*=portable"
    assert chosen(plan)["m.1.attn"] == ("vendor", "attention=vendor")


@pytest.mark.parametrize("rules, message", [
    ("attention=vendr", "preference 'attention=vendr' names unknown backend 'vendr'; did you mean 'vendor'? "
                        "(installed: gpu_only, kernels, portable, ssm, vendor)"),
    ("attention=ssm", "preference 'attention=ssm' names backend 'ssm', which serves mamba2, not attention"),
    ("mamba2=ssm", "rule 'mamba2=ssm' matches no layer: this model has no mamba2 layers"),
    ("m.9.*=vendor", "rule 'm.9.*=vendor' matches no layer of this model"),
    ("attention=vendor,attention=vendor", "preference 'attention=vendor' is given twice"),
    ("retention=vendor", "preference 'retention=vendor' names unknown kind 'retention'"),
    ("attention", "bad preference 'attention': write KIND=BACKEND"),
    # a typo after a preference that serves here is still a typo
    ("attention=portable,attention=vendr", "preference 'attention=vendr' names unknown backend 'vendr'"),
    ("attention=portable,m.*=ssm", "rule 'm.*=ssm' matches no mamba2 layer: 'ssm' serves mamba2, and the layers "
                                       "it names are of kind attention"),
])
def test_a_preference_that_cannot_mean_anything_is_an_error(rules, message):
    with pytest.raises(UsageError, match=None) as info:
        registry().plan(LAYERS, CPU, prefer=rules)
    assert message in str(info.value)


def test_a_preference_every_layer_of_which_is_forced_is_an_error():
    with pytest.raises(UsageError) as info:
        registry().plan(LAYERS, CPU, overrides="attention=portable", prefer="attention=vendor")
    assert str(info.value) == ("preference 'attention=vendor' names only layers that backend rules force "
                               "(m.0.attn, ...); drop it")


def _cli(*args, env_extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MIXBOARD_")}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "mixboard_runner", *args], capture_output=True, text=True, env=env)


def test_the_cli_and_its_variable_prefer_an_installed_backend_without_forcing_it():
    out = _cli("explain", "demo", "--prefer", "attention=sdpa", "--json")
    assert out.returncode == 0, out.stderr
    layers = json.loads(out.stdout)["layers"]
    attention = [layer for layer in layers if layer["kind"] == "attention"]
    assert attention and all(layer["backend"] == "sdpa" and layer["preferred_by"] == "attention=sdpa"
                             and layer["rule"] is None for layer in attention)
    assert all(layer["preferred_by"] is None for layer in layers if layer["kind"] != "attention")
    # the variable does the same; --prefer given beats it
    out = _cli("select", "attention", "--json", env_extra={"MIXBOARD_PREFER": "attention=sdpa"})
    assert json.loads(out.stdout)["chosen"] == "sdpa"
    by_priority = get_registry().select("attention").chosen.name  # sdpa_cpu where its C kernel built
    out = _cli("select", "attention", "--json", "--prefer", "", env_extra={"MIXBOARD_PREFER": "attention=sdpa"})
    assert json.loads(out.stdout)["chosen"] == by_priority
    # a preference that cannot serve here is no error: flash_attn needs a GPU
    out = _cli("select", "attention", "--prefer", "attention=flash_attn", "--json")
    data = json.loads(out.stdout)
    assert out.returncode == 0 and data["chosen"] == by_priority and data["preferred_by"] is None
    assert data["rejected"]["flash_attn"][0] == "preferred by rule 'attention=flash_attn' but cannot serve it"
    out = _cli("explain", "demo", "--prefer", "attention=sdpx")
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "did you mean 'sdpa'?" in out.stderr


def test_select_is_as_strict_as_a_plan():
    for args, message in [(["--prefer", "mamba2=mamba2_torch"], "this model has no mamba2 layers"),
                          (["--backend", "mamba2=mamba2_torch"], "this model has no mamba2 layers"),
                          (["--prefer", "model.layers.9.*=sdpa", "--layer", "model.layers.0.self_attn"],
                           "matches no layer of this model"),
                          (["--prefer", "model.layers.9.*=sdpa"], "give the layer's name (--layer NAME)")]:
        out = _cli("select", "attention", *args)
        assert out.returncode == 2 and message in out.stderr and out.stderr.count("\n") == 1, (args, out.stderr)


def test_the_engine_takes_preferences_and_their_variable(monkeypatch):
    from mixboard_runner.engine import Engine

    engine = Engine("demo", prefer="attention=sdpa")
    assert {layer.backend for layer in engine.plan.layers if layer.kind == "attention"} == {"sdpa"}
    monkeypatch.setenv("MIXBOARD_PREFER", "attention=sdpa")
    assert {layer.backend for layer in Engine("demo").plan.layers if layer.kind == "attention"} == {"sdpa"}
    assert "sdpa" not in {layer.backend for layer in Engine("demo", prefer="").plan.layers} or \
        get_registry().select("attention").chosen.name == "sdpa"
    with pytest.raises(UsageError, match="prefer must be"):
        Engine("demo", prefer=["attention=sdpa"])
