"""Selection: strict overrides, reasons, tie-breaks, memoization, plans."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

from mixboard import AttentionSpec, Backend, Mamba2Spec, Registry, SelectionError, UsageError, simulate
from mixboard.cpu_features import CPU_FEATURES
from mixboard.state import StateSpec

CPU = simulate("cpu")
H100 = simulate("cuda", "9.0")


def make(name, kind="attention", priority=0, devices=("*",), dtypes=("float32",), requires=(), check=None,
         install_hint=""):
    attrs = dict(name=name, kind=kind, priority=priority, devices=devices, dtypes=dtypes, requires=requires,
                 api_version=1, install_hint=install_hint, calls=0)
    if check is not None:
        attrs["check"] = classmethod(check)
    return type(name.title(), (Backend,), attrs)


def counted(reasons):
    def check(cls, spec, env):
        cls.calls += 1
        return list(reasons)
    return check


def fast_head_sizes(cls, spec, env):
    reasons = []
    if spec.head_size not in (64, 128):
        reasons.append(f"head_size {spec.head_size} is not one of 64, 128")
    if env.capability is None or env.capability < (8, 0):
        reasons.append("needs compute capability >= 8.0")
    return reasons


PORTABLE = make("portable", priority=10, dtypes=("float32", "bfloat16"))
FAST = make("fast", priority=100, devices=("cuda",), dtypes=("bfloat16", "float16", "float32"), check=fast_head_sizes)
SSM = make("ssm_torch", kind="mamba2", priority=10)


def registry(*backends):
    return Registry.from_backends(backends or (PORTABLE, FAST, SSM))


def test_highest_priority_passing_backend_wins_with_reasons_for_the_rest():
    r = registry()
    assert r.select("attention", AttentionSpec(), H100).chosen.name == "fast"
    sel = r.select("attention", AttentionSpec(), CPU)
    assert sel.chosen.name == "portable"
    assert sel.rejected == {"fast": ("runs on cuda; this environment is cpu", "needs compute capability >= 8.0")}
    sel = r.select("attention", AttentionSpec(head_size=96), H100)
    assert sel.chosen.name == "portable" and sel.rejected["fast"] == ("head_size 96 is not one of 64, 128",)
    # a passing loser is told why it lost
    assert "higher priority (100 > 10)" in r.select("attention", AttentionSpec(), H100).rejected["portable"][0]


def test_ties_break_on_name_whatever_the_registration_order():
    backends = [make(n, priority=7) for n in ("zeta", "alpha", "mid")] + [make("low", priority=1)]
    seen = set()
    for _ in range(10):
        random.shuffle(backends)
        seen.add(registry(*backends).select("attention", AttentionSpec(), CPU).chosen.name)
    assert seen == {"alpha"}


def test_selection_is_memoized():
    counter = make("counter", check=counted([]))
    r = registry(counter)
    first = r.select("attention", AttentionSpec(), CPU)
    for _ in range(5):
        assert r.select("attention", AttentionSpec(), CPU) is first
    assert counter.calls == 1
    r.select("attention", AttentionSpec(num_heads=16), CPU)
    assert counter.calls == 2


def test_nothing_qualifies_lists_every_candidate_with_reasons_and_a_hint():
    missing = make("needs_lib", priority=50, requires=("surely_not_installed_lib",), install_hint="pip install surely-lib")
    r = registry(FAST, missing)
    with pytest.raises(SelectionError) as info:
        r.select("attention", AttentionSpec(dtype="float64"), CPU)
    message = str(info.value)
    assert "fast: runs on cuda; this environment is cpu" in message
    assert "supports dtypes bfloat16, float16, float32; the layer is float64" in message
    assert "needs_lib: " in message and "surely_not_installed_lib" in message and "pip install surely-lib" in message
    assert "pip install mixboard-sdpa" in message
    assert set(info.value.candidates) == {"fast", "needs_lib"}


def test_no_backend_of_a_kind_installed():
    with pytest.raises(SelectionError, match="no backend of kind 'mamba1' is installed: pip install mixboard-mamba1"):
        registry().select("mamba1", env=CPU)


def test_forced_backend_is_strict_never_a_fallback():
    r = registry()
    rules = r.parse_overrides("attention=fast")
    with pytest.raises(SelectionError, match="'fast' is forced by rule 'attention=fast'.*runs on cuda") as info:
        r.select("attention", AttentionSpec(), CPU, overrides=rules)
    assert info.value.candidates == {"fast": ["runs on cuda; this environment is cpu", "needs compute capability >= 8.0"]}
    # a forced lower-priority backend is honoured where it passes
    sel = r.select("attention", AttentionSpec(), H100, overrides=r.parse_overrides("attention=portable"))
    assert sel.chosen.name == "portable" and sel.rule == "attention=portable"
    assert sel.rejected["fast"] == ("not forced: rule 'attention=portable' picks portable",)


def test_forced_unknown_or_wrong_kind_backend_is_a_usage_error():
    r = registry()
    with pytest.raises(UsageError, match="unknown backend 'portabel'.*did you mean 'portable'"):
        r.select("attention", AttentionSpec(), CPU, overrides=r.parse_overrides("attention=portabel"))
    # a layer pattern picks layers of its backend's kind only: one that names none of them is an error
    with pytest.raises(UsageError, match="'l.*=ssm_torch' matches no mamba2 layer: 'ssm_torch' serves mamba2, and the "
                                         "layers it names are of kind attention"):
        r.plan([("l.0", "attention", AttentionSpec())], CPU, overrides="l.*=ssm_torch")
    # ... and leaves the layers of other kinds it names to their own rules
    plan = r.plan([("l.0", "attention", AttentionSpec()), ("l.1", "mamba2", Mamba2Spec())], CPU,
                  overrides="l.*=ssm_torch")
    assert plan.layers[1].backend == "ssm_torch" and plan.layers[0].selection.rule is None and plan.layers[1].selection.rule == "l.*=ssm_torch"


@pytest.mark.parametrize("text, message", [
    ("attention", "bad backend rule 'attention'"),
    ("attention=", "bad backend rule"),
    ("=sdpa", "bad backend rule"),
    ("attn=sdpa", "unknown kind 'attn'"),
    ("attention=sdpa,attention=fast", "given twice"),
    ("attention=not a name", "bad backend name"),
])
def test_bad_override_syntax(text, message):
    with pytest.raises(UsageError, match=message):
        registry().parse_overrides(text)


def test_layer_rule_beats_kind_rule_and_first_layer_pattern_wins():
    r = registry(PORTABLE, make("other", priority=1), make("third", priority=2))
    rules = r.parse_overrides("attention=other,model.layers.3.*=third,model.layers.*=portable")
    assert r.select("attention", AttentionSpec(), CPU, layer="model.layers.3.attn", overrides=rules).chosen.name == "third"
    assert r.select("attention", AttentionSpec(), CPU, layer="model.layers.4.attn", overrides=rules).chosen.name == "portable"
    assert r.select("attention", AttentionSpec(), CPU, layer="encoder.attn", overrides=rules).chosen.name == "other"


def test_a_check_that_raises_is_a_reason_not_a_crash():
    def boom(cls, spec, env):
        raise KeyError("head_size")
    r = registry(PORTABLE, make("buggy", priority=99, check=boom))
    sel = r.select("attention", AttentionSpec(), CPU)
    assert sel.chosen.name == "portable"
    assert sel.rejected["buggy"] == ("its check() raised KeyError: 'head_size'",)


def test_spec_must_match_the_kind():
    with pytest.raises(UsageError, match="needs a AttentionSpec, not Mamba2Spec"):
        registry().select("attention", Mamba2Spec(), CPU)


def _hybrid_layers(n):
    layers = []
    for i in range(n):
        if i % 4 == 0:
            layers.append((f"model.layers.{i}.attn", "attention", AttentionSpec(num_heads=16, num_kv_heads=4)))
        else:
            layers.append((f"model.layers.{i}.mixer", "mamba2", Mamba2Spec(num_heads=16)))
    return layers


def test_plan_groups_layers_by_backend_and_state_layout():
    r = registry()
    layers = _hybrid_layers(8) + [("model.extra.attn", "attention", AttentionSpec(num_heads=16, num_kv_heads=8))]
    plan = r.plan(layers, CPU, overrides="model.layers.4.*=portable")
    assert [l.backend for l in plan.layers][:2] == ["portable", "ssm_torch"]
    groups = {(g.backend, g.state_spec.tensors[0][1].shape): g.layers for g in plan.groups}
    assert groups == {
        ("portable", (4, 64)): ("model.layers.0.attn", "model.layers.4.attn"),
        ("ssm_torch", (16 * 64 + 2 * 128, 3)): tuple(f"model.layers.{i}.mixer" for i in (1, 2, 3, 5, 6, 7)),
        ("portable", (8, 64)): ("model.extra.attn",),
    }
    data = json.loads(json.dumps(plan.to_dict()))
    assert data["layers"][4]["rule"] == "model.layers.4.*=portable"
    assert data["groups"][0]["state"]["layout"] == "paged"
    assert data["environment"] == {"device": "cpu", "capability": None, "torch_version": CPU.torch_version,
                                   "runtime": None, "arch": None, "cpu_features": sorted(CPU.cpu_features,
                                                                                         key=CPU_FEATURES.index)}


@pytest.mark.parametrize("rules, message", [
    ("model.layers.9.*=portable", "rule 'model.layers.9.*=portable' matches no layer of this model"),
    # the examples are layers the backend's kind has, not the mamba2 layers between them
    ("model.layers.9.*=portable", "its attention layers are named like model.layers.0.attn, model.layers.4.attn"),
    ("model.layer.4.*=portable", "did you mean 'model.layers.4.attn'?"),
    ("model.layers.9.*=only_mamba1", "rule 'model.layers.9.*=only_mamba1' matches no layer: 'only_mamba1' serves "
                                     "mamba1, and this model has no mamba1 layers; drop the rule"),
    ("mamba1=portable", "rule 'mamba1=portable' matches no layer: this model has no mamba1 layers "
                        "(its layers are of kind attention, mamba2)"),
    ("model.layers.9.*=portabel", "rule 'model.layers.9.*=portabel' names unknown backend 'portabel'; "
                                  "did you mean 'portable'?"),
])
def test_a_rule_that_picks_no_layer_is_an_error_saying_what_it_could_mean(rules, message):
    with pytest.raises(UsageError) as info:
        registry(PORTABLE, FAST, SSM, make("only_mamba1", kind="mamba1")).plan(
            _hybrid_layers(8), CPU, overrides=f"attention=portable,{rules}")
    assert message in str(info.value)


def test_a_pattern_after_one_that_takes_all_its_layers_is_unused():
    with pytest.raises(UsageError, match=r"rule 'model.layers.4.attn=fast' picks no layer: rules before it pick "
                                         r"every layer it matches \(model.layers.4.attn\)"):
        registry().plan(_hybrid_layers(8), CPU, overrides="model.layers.4.*=portable,model.layers.4.attn=fast")


def test_a_rule_shadowed_by_layer_patterns_on_every_layer_it_could_pick_is_unused():
    # every attention layer is picked by the pattern: the kind rule chose nothing
    with pytest.raises(UsageError, match="rule 'attention=fast' matches no layer: layer patterns pick every "
                                         "attention layer before it"):
        registry().plan(_hybrid_layers(8), CPU, overrides="attention=fast,model.layers.*.attn=portable")


def test_plan_rejects_duplicate_layer_names():
    with pytest.raises(UsageError, match="appears twice"):
        registry().plan([("a", "attention", AttentionSpec())] * 2, CPU)


def test_backend_state_spec_override_is_used():
    class Transposed(Backend):
        name, kind, devices, dtypes, api_version = "transposed", "attention", ("*",), ("float32",), 1

        @classmethod
        def state_spec(cls, spec):
            return StateSpec.paged(kv=((2, spec.head_size, spec.num_kv_heads), spec.dtype))

    sel = registry(Transposed).select("attention", AttentionSpec(), CPU)
    assert sel.state_spec.tensors[0][0] == "kv"


DEFAULT_STATE_SCRIPT = """
import mixboard.registry
from mixboard import AttentionSpec, Backend
from mixboard.kinds import ATTENTION

class Plain(Backend):
    name, kind, devices, dtypes, api_version = "plain", "attention", ("*",), ("float32",), 1

assert Plain.state_spec(AttentionSpec()) == ATTENTION.state_spec(AttentionSpec())
print(mixboard.registry._REGISTRY is None)
"""


def test_the_default_state_spec_is_the_kinds_without_loading_plugins():
    out = subprocess.run([sys.executable, "-c", DEFAULT_STATE_SCRIPT], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True"]  # the registry (an entry-point scan) was never built


def test_the_default_state_spec_of_a_kind_a_plugin_defines_names_where_it_lives():
    ema = make("ema_torch", kind="ema")
    with pytest.raises(UsageError, match=r"kind 'ema', which is not built in.*registry.kind\('ema'\)"):
        ema.state_spec(AttentionSpec())


FINGERPRINT_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
from test_selection import registry, _hybrid_layers, CPU
print(registry().plan(_hybrid_layers(12), CPU).fingerprint)
"""


def test_fingerprint_is_stable_across_processes_and_changes_with_the_choice():
    import os

    tests = os.path.dirname(__file__)
    r = registry()
    here = r.plan(_hybrid_layers(12), CPU).fingerprint
    there = subprocess.run([sys.executable, "-c", FINGERPRINT_SCRIPT.format(tests=tests)],
                           capture_output=True, text=True, check=True, env={**os.environ, "PYTHONHASHSEED": "123"})
    assert there.stdout.strip() == here
    assert r.plan(_hybrid_layers(12), CPU, overrides="model.layers.0.*=portable").fingerprint == here
    assert r.plan(_hybrid_layers(12), H100).fingerprint != here  # attention moves to 'fast'


def test_plan_block_multiple_is_the_lcm_of_paged_groups():
    class Paged256(Backend):
        name, kind, devices, dtypes, api_version = "paged256", "attention", ("*",), ("float32",), 1

        @classmethod
        def state_spec(cls, spec):
            return StateSpec.paged(block_multiple=256, k=((spec.num_kv_heads, spec.head_size), spec.dtype))

    r = registry(PORTABLE, SSM)
    layers = [("a.0", "attention", AttentionSpec()), ("m.1", "mamba2", Mamba2Spec())]
    assert r.plan(layers, CPU).block_multiple == 1
    assert registry(Paged256, SSM).plan(layers, CPU).block_multiple == 256
    with pytest.raises(ValueError, match="paged state only"):
        StateSpec("slots", (), block_multiple=2)


def test_the_mixer_fingerprint_is_the_plan_of_the_mixers_alone():
    # an engine that runs its own dense ops (vLLM) plans the mixers alone: its fingerprint is this one
    from mixboard import LinearSpec
    from mixboard.torch_ops.backends import PORTABLE_BACKENDS

    r = Registry.from_backends([entry.cls for entry in registry().backends.values()] + list(PORTABLE_BACKENDS))
    mixers = [("l.0.attn", "attention", AttentionSpec()), ("l.1.ssm", "mamba2", Mamba2Spec())]
    whole = r.plan([("l.0.proj", "linear", LinearSpec()), *mixers], CPU)
    alone = r.plan(mixers, CPU)
    assert whole.mixer_fingerprint == alone.fingerprint == alone.mixer_fingerprint
    assert whole.fingerprint != alone.fingerprint
