"""Per-phase plans: rules naming a phase, layers split by phase, one state layout between the phases."""

from __future__ import annotations

import json

import pytest
import torch

from mixboard import AttentionSpec, Backend, CommonBatchMetadata, Mamba2Spec, Registry, SelectionError, UsageError
from mixboard import simulate
from mixboard.kinds import Kind
from mixboard.kinds.op import no_state
from mixboard.state import StateSpec

CPU = simulate("cpu")


def make(name, kind="attention", priority=0, state=None):
    attrs = dict(name=name, kind=kind, priority=priority, devices=("*",), dtypes=("float32",), api_version=1)
    if state is not None:
        attrs["state_spec"] = classmethod(lambda cls, spec: state(spec))
    return type(name.title(), (Backend,), attrs)


def transposed(spec):  # another layout of attention's state than the kind's
    return StateSpec.paged(kv=((2, spec.head_size, spec.num_kv_heads), spec.dtype))


FAST = make("fast", priority=20)
PLAIN = make("plain", priority=10)
ODD = make("odd", priority=5, state=transposed)
SSM = make("ssm", kind="mamba2", priority=10)


def registry(*backends, kinds=()):
    return Registry.from_backends(backends or (FAST, PLAIN, ODD, SSM), kinds)


def layers(n=4):
    return [(f"model.layers.{i}.attn", "attention", AttentionSpec()) if i % 2 == 0 else
            (f"model.layers.{i}.mixer", "mamba2", Mamba2Spec(num_heads=16)) for i in range(n)]


def by_layer(plan):
    return {layer.name: (layer.backend, layer.decode_backend) for layer in plan.layers}


def test_a_phase_rule_splits_the_layers_it_names():
    plan = registry().plan(layers(), CPU, overrides="attention@decode=plain")
    assert by_layer(plan) == {"model.layers.0.attn": ("fast", "plain"), "model.layers.1.mixer": ("ssm", "ssm"),
                              "model.layers.2.attn": ("fast", "plain"), "model.layers.3.mixer": ("ssm", "ssm")}
    assert [layer.split for layer in plan.layers] == [True, False, True, False]
    split = plan.layers[0]
    assert split.decode_selection.rule == "attention@decode=plain" and split.selection.rule is None
    data = json.loads(json.dumps(plan.to_dict()))
    assert data["layers"][0]["backend"] == "fast"
    assert data["layers"][0]["decode"]["backend"] == "plain"
    assert data["layers"][0]["decode"]["rule"] == "attention@decode=plain"
    assert "decode" not in data["layers"][1]
    groups = {g.layers: (g.backend, g.decode_backend) for g in plan.groups}
    assert groups[("model.layers.0.attn", "model.layers.2.attn")] == ("fast", "plain")


def test_a_rule_for_both_phases_keeps_a_layer_whole_and_the_fingerprint_tells_plans_apart():
    r = registry()
    whole = r.plan(layers(), CPU, overrides="attention=plain")
    assert not any(layer.split for layer in whole.layers)
    split = r.plan(layers(), CPU, overrides="attention@decode=plain")
    plain = r.plan(layers(), CPU)
    assert len({whole.fingerprint, split.fingerprint, plain.fingerprint}) == 3
    # a phase rule that names the backend the layer has anyway splits nothing, and changes no fingerprint
    same = r.plan(layers(), CPU, overrides="attention@decode=fast")
    assert not any(layer.split for layer in same.layers) and same.fingerprint == plain.fingerprint


def test_layer_patterns_come_before_kind_rules_and_a_phase_rule_before_one_for_both():
    plan = registry().plan(layers(), CPU, overrides="attention@decode=plain,model.layers.0.*=fast,"
                                                    "model.layers.2.*@prefill=plain")
    assert by_layer(plan)["model.layers.0.attn"] == ("fast", "fast")
    assert by_layer(plan)["model.layers.2.attn"] == ("plain", "plain")
    plan = registry().plan(layers(), CPU, overrides="attention=plain,attention@prefill=fast")
    assert by_layer(plan)["model.layers.0.attn"] == ("fast", "plain")


def test_preferences_name_phases_too():
    plan = registry().plan(layers(), CPU, prefer="attention@decode=plain")
    assert by_layer(plan)["model.layers.0.attn"] == ("fast", "plain")
    assert plan.layers[0].decode_selection.preferred_by == "attention@decode=plain"


def test_a_phase_forced_onto_another_state_layout_fails_saying_why():
    with pytest.raises(SelectionError) as err:
        registry().plan(layers(), CPU, overrides="attention@prefill=fast,attention@decode=odd")
    message = str(err.value)
    assert "backend 'odd' is forced by rule 'attention@decode=odd'" in message
    assert "(decode rows)" in message and "a layer's two phases share one state" in message
    assert "but 'fast', which runs its prefill rows, keeps paged k_cache" in message


def test_the_forced_phase_leads_and_the_other_follows_its_state_layout():
    plan = registry().plan(layers(), CPU, overrides="attention@decode=odd")
    # no other backend keeps odd's layout: the prefill rows go to odd too, and the plan says why
    assert by_layer(plan)["model.layers.0.attn"] == ("odd", "odd")
    rejected = plan.layers[0].selection.rejected
    assert "a layer's two phases share one state" in rejected["fast"][-1]
    odd_too = make("odd_too", priority=1, state=transposed)
    plan = registry(FAST, PLAIN, ODD, odd_too, SSM).plan(layers(), CPU, overrides="attention@prefill=odd_too")
    assert by_layer(plan)["model.layers.0.attn"] == ("odd_too", "odd")


def test_a_preferred_phase_backend_of_another_layout_is_passed_over_with_its_reason():
    plan = registry().plan(layers(), CPU, prefer="attention@decode=odd")
    layer = plan.layers[0]
    assert (layer.backend, layer.decode_backend) == ("fast", "fast") and not layer.split
    plan = registry().plan(layers(), CPU, prefer="attention@decode=odd,attention@decode=plain")
    reasons = plan.layers[0].decode_selection.rejected["odd"]
    assert reasons[0] == "preferred by rule 'attention@decode=odd' but cannot serve it"
    assert "share one state" in reasons[-1]


def test_a_kind_without_row_inputs_cannot_split():
    spec_cls = AttentionSpec  # any spec class will do: the kind is what matters here
    kind = Kind("blob", spec_cls, object, no_state, "a kind that declares no row inputs")
    one, two = make("blob_one", kind="blob", priority=2), make("blob_two", kind="blob", priority=1)
    r = registry(one, two, kinds=[kind])
    layer = r.plan([("x.blob", "blob", spec_cls())], CPU, overrides="blob@decode=blob_two").layers[0]
    assert (layer.backend, layer.decode_backend) == ("blob_two", "blob_two")  # the prefill rows follow
    assert "does not declare its per-row inputs" in layer.selection.rejected["blob_one"][-1]
    with pytest.raises(SelectionError, match="does not declare its per-row inputs"):
        r.plan([("x.blob", "blob", spec_cls())], CPU, overrides="blob@decode=blob_two,blob@prefill=blob_one")


@pytest.mark.parametrize("rules, message", [
    ("attention@later=plain", "bad phase 'later' in backend rule 'attention@later=plain': a phase is one of "
                              "prefill, decode"),
    ("@decode=plain", "name a kind or a layer pattern before '@'"),
    ("attention@decode=plain,attention@decode=fast", "backend rule for 'attention@decode' is given twice"),
    ("mamba9@decode=plain", "names unknown kind 'mamba9'"),
    ("short_conv@decode=plain", "rule 'short_conv@decode=plain' matches no layer: this model has no short_conv layers"),
])
def test_bad_phase_rules(rules, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        registry().plan(layers(), CPU, overrides=rules)


def test_a_phase_rule_that_names_no_layer_is_an_error():
    with pytest.raises(UsageError, match=r"rule 'model.layers.9.\*@decode=plain' matches no layer of this model"):
        registry().plan(layers(), CPU, overrides="model.layers.9.*@decode=plain")


@pytest.mark.parametrize("query, context", [
    ([1, 1, 5, 3], [4, 9, 0, 2]),  # two decodes, two prefills (one continuing)
    ([1, 1, 1], [1, 7, 30]),  # decodes only: the step is its own decode part
    ([6, 2], [0, 0]),  # prefills only
])
def test_the_phase_parts_of_a_step_are_the_metadata_of_their_sequences_alone(query, context):
    block = 4
    tables, next_block = [], 11  # blocks out of order, as a runner hands them out
    for q, c in zip(query, context):
        need = -(-(q + c) // block)
        tables.append([next_block - i for i in range(need)])
        next_block -= need + 1
    slots = [5, 0, 3, 9][:len(query)]
    common = CommonBatchMetadata.build(query, context, slots, tables, block)
    decodes, prefills = common.phase_parts
    n = common.num_decodes
    for part, first, end in ((decodes, 0, n), (prefills, n, len(query))):
        if first == end:
            assert part is None
            continue
        alone = CommonBatchMetadata.build(query[first:end], context[first:end], slots[first:end],
                                          tables[first:end], block)
        for field in vars(alone):
            mine, want = getattr(part, field), getattr(alone, field)
            if isinstance(want, torch.Tensor):
                assert mine.is_contiguous(), field
                if field.startswith("block_table"):  # the whole step's width: the extra columns are padding
                    mine = mine[:, :want.shape[1]]
                assert torch.equal(mine, want), field
            else:
                assert mine == want, field


def coarse(spec):  # attention's own records, in blocks of a multiple of 256 (flash-attn's paged kernel)
    kept = registry().kind("attention").state_spec(spec)
    return StateSpec(kept.layout, kept.tensors, 256)


def test_backends_that_differ_only_in_block_multiple_share_a_layer():
    plan = registry(FAST, PLAIN, make("coarse", priority=1, state=coarse), SSM).plan(
        layers(), CPU, overrides="attention@decode=coarse")
    assert by_layer(plan)["model.layers.0.attn"] == ("fast", "coarse")
    (group,) = [g for g in plan.groups if g.kind == "attention"]
    assert group.state_spec.block_multiple == 256 and plan.block_multiple == 256  # the pools suit both


def test_a_phase_choice_names_its_own_phase_in_the_reasons():
    r = registry()
    leader = r.select("attention", AttentionSpec(), CPU, overrides=r.parse_overrides("attention=odd"))
    decode = r.select("attention", AttentionSpec(), CPU, phase="decode", share_state_with=leader)
    prefill = r.select("attention", AttentionSpec(), CPU, phase="prefill", share_state_with=leader)
    assert "which runs its prefill rows" in decode.rejected["fast"][-1]
    assert "which runs its decode rows" in prefill.rejected["fast"][-1]


def test_a_phase_rule_that_agrees_with_the_other_phase_still_shows():
    layer = registry().plan(layers(), CPU, overrides="attention@decode=fast").layers[0]
    assert not layer.split and layer.selection.rule == "attention@decode=fast"
