"""Backend options as users set them, against a registry of real installed
test distributions: every parse and validation error with its message, the
plan's resolved values, the fingerprint, and the values reaching make_impl
and builder."""

from __future__ import annotations

import pytest

from mixboard import AttentionSpec, OptionValues, simulate
from mixboard.errors import MixboardError, UsageError
from mixboard.ops.checks import build_builder, build_impl
from mixboard.option_rules import parse

CPU = simulate("cpu")

SOURCE = '''
from types import SimpleNamespace

from mixboard import Backend, Option, hookimpl
from mixboard.options import defaults


class Tiled(Backend):
    name = "tiled_attn"
    kind = "attention"
    priority = 5
    devices = ("*",)
    dtypes = ("float32",)
    api_version = 1
    options = (
        Option("tile", int, 64, "keys per tile", choices=(32, 64, 128)),
        Option("split", bool, True, "split long sequences"),
        Option("scale", float, 1, "a factor on the scores", minimum=0.0),
        Option("mode", str, "fast", "how it runs", choices=("fast", "exact")),
    )

    @classmethod
    def builder(cls, spec, env, options):
        return lambda common: ("meta", options)

    @classmethod
    def make_impl(cls, spec, env, options=None):
        return SimpleNamespace(options=options or defaults(cls))  # None: a subclass's call, or a direct one


class TiledOwnImpl(Tiled):
    """A subclass that overrides make_impl without taking options (calls super() without them)."""

    name = "tiled_own"

    @classmethod
    def make_impl(cls, spec, env):
        return super().make_impl(spec, env)


class Plain(Backend):
    name = "plain_attn"
    kind = "attention"
    priority = 9
    devices = ("*",)
    dtypes = ("float32",)
    api_version = 1

    @classmethod
    def make_impl(cls, spec, env):
        return SimpleNamespace()


@hookimpl
def mixboard_backends():
    return [Tiled, TiledOwnImpl, Plain]
'''

DEFAULTS = {"tile": 64, "split": True, "scale": 1.0, "mode": "fast"}


@pytest.fixture
def registry(distributions):
    distributions.add("acme-tiled", "2.0", {"tiled": "acme_tiled"}, {"acme_tiled.py": SOURCE})
    return distributions.registry()


def layers(n=2):
    return [(f"model.layers.{i}.attn", "attention", AttentionSpec()) for i in range(n)]


def plan(registry, options=None, backend="attention=tiled_attn"):
    return registry.plan(layers(), CPU, overrides=backend, options=options)


@pytest.mark.parametrize("given, message", [
    ("tiled_attn.tile", "bad backend option 'tiled_attn.tile': write BACKEND.OPTION=VALUE, for example "
                        "linear_onednn.layout=as_loaded"),
    ("tile=64", "bad backend option 'tile=64': write BACKEND.OPTION=VALUE"),
    ("tiled_attn.tile=", "bad backend option 'tiled_attn.tile=': write BACKEND.OPTION=VALUE"),
    ("tiled_atn.tile=64", "backend option 'tiled_atn.tile=64' names unknown backend 'tiled_atn'; did you mean "
                          "'tiled_attn'? (installed: plain_attn, tiled_attn, tiled_own)"),
    ("plain_attn.tile=64", "backend option 'plain_attn.tile=64': backend 'plain_attn' declares no options "
                           "(backends that do: tiled_attn, tiled_own; `mixboard backends NAME` lists them)"),
    ("tiled_attn.tiles=64", "backend option 'tiled_attn.tiles=64': tiled_attn has no option 'tiles'; did you mean "
                            "'tile'? (its options: tile, split, scale, mode)"),
    ("tiled_attn.tile=48", "backend option 'tiled_attn.tile=48': tile takes one of 32, 64, 128, not 48 "
                           "(keys per tile)"),
    ("tiled_attn.tile=big", "backend option 'tiled_attn.tile=big': tile takes one of 32, 64, 128, not 'big'"),
    ("tiled_attn.split=maybe", "backend option 'tiled_attn.split=maybe': split takes true or false, not 'maybe' "
                               "(split long sequences)"),
    ("tiled_attn.scale=-1", "scale takes a finite number of at least 0.0, not -1.0 (a factor on the scores)"),
    ("tiled_attn.scale=nan", "scale takes a finite number of at least 0.0, not nan"),
    ("tiled_attn.mode=slow", "mode takes one of fast, exact, not 'slow' (how it runs)"),
    ("tiled_attn.tile=32,tiled_attn.tile=64", "backend option tiled_attn.tile is given twice (32 and 64)"),
    ({"tiled_attn": {"tile": 64.0}}, "backend option 'tiled_attn.tile=64.0': tile takes one of 32, 64, 128, not 64.0"),
    ({"tiled_attn": {"split": 1}}, "split takes true or false, not 1"),
    ({"tiled_attn": 5}, "backend options map each backend's name to {option: value}; got 'tiled_attn': 5"),
    (5, "backend options must be text (BACKEND.OPTION=VALUE,...) or a mapping {backend: {option: value}}, not int"),
])
def test_a_bad_option_is_one_clear_line_before_anything_is_selected(registry, given, message):
    with pytest.raises(UsageError) as caught:
        plan(registry, given)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_an_option_for_a_backend_no_layer_runs_is_an_error(registry):
    with pytest.raises(UsageError, match=r"backend option 'tiled_attn.tile=128' names backend 'tiled_attn', which no "
                                         r"layer of this model runs: its attention layers run on plain_attn \(force "
                                         r"it with --backend attention=tiled_attn, or drop the option\)"):
        plan(registry, "tiled_attn.tile=128", backend=None)  # plain_attn wins on priority


def test_the_plan_carries_every_option_of_the_backends_it_runs(registry):
    p = plan(registry, "tiled_attn.tile=128, tiled_attn.mode=exact")
    assert p.options == {"tiled_attn": {**DEFAULTS, "tile": 128, "mode": "exact"}}
    assert isinstance(p.options["tiled_attn"], OptionValues)
    assert p.to_dict()["options"] == {"tiled_attn": {**DEFAULTS, "tile": 128, "mode": "exact"}}
    assert plan(registry).options == {"tiled_attn": DEFAULTS}  # none given: the defaults, shown all the same
    assert plan(registry, backend=None).options == {} and plan(registry, backend=None).to_dict()["options"] == {}


def test_text_and_mapping_give_the_same_typed_values(registry):
    text = parse("tiled_attn.tile=32,tiled_attn.split=off,tiled_attn.scale=2,tiled_attn.mode=exact",
                 registry.backends)
    mapping = parse({"tiled_attn": {"tile": 32, "split": False, "scale": 2, "mode": "exact"}}, registry.backends)
    assert text == mapping == {"tiled_attn": {"tile": 32, "split": False, "scale": 2.0, "mode": "exact"}}
    assert isinstance(text["tiled_attn"]["scale"], float)


def test_the_fingerprint_holds_the_values_that_run(registry):
    default = plan(registry)
    explicit = plan(registry, "tiled_attn.tile=64,tiled_attn.split=true,tiled_attn.scale=1.0")
    other = plan(registry, "tiled_attn.tile=128")
    # an option given at its default fingerprints as one left out; another value, another fingerprint
    assert default.fingerprint == explicit.fingerprint != other.fingerprint
    assert default.mixer_fingerprint == explicit.mixer_fingerprint != other.mixer_fingerprint
    assert default.fingerprint_rows()[0][-1] == {"tiled_attn": DEFAULTS}
    # a backend that declares no options keeps the rows it always had
    assert len(plan(registry, backend=None).fingerprint_rows()[0]) == 6


def test_the_values_reach_make_impl_and_builder(registry):
    p = plan(registry, "tiled_attn.tile=32,tiled_attn.split=false")
    cls = p.layers[0].selection.backend
    impl = build_impl(cls, AttentionSpec(), CPU, "model.layers.0.attn", p.options["tiled_attn"])
    assert impl.layer_name == "model.layers.0.attn"
    assert impl.options.tile == 32 and impl.options.split is False and impl.options.mode == "fast"
    _, meta_options = build_builder(cls, AttentionSpec(), CPU, p.options["tiled_attn"])(None)
    assert meta_options is p.options["tiled_attn"]
    # none given (a caller that does not plan, the conformance kit's default): every default
    assert dict(build_impl(cls, AttentionSpec(), CPU, "x").options) == DEFAULTS
    plain = registry.backends["plain_attn"].cls  # declares none: called as it always was
    assert build_impl(plain, AttentionSpec(), CPU, "x").layer_name == "x"
    with pytest.raises(MixboardError, match="'plain_attn' declares no options"):
        build_impl(plain, AttentionSpec(), CPU, "x", {"tile": 32})


def test_a_subclass_whose_override_takes_no_options_runs_only_on_the_defaults(registry):
    own = registry.backends["tiled_own"].cls
    assert dict(build_impl(own, AttentionSpec(), CPU, "x", OptionValues(DEFAULTS)).options) == DEFAULTS
    with pytest.raises(MixboardError, match=r"backend 'tiled_own' is given options \{'tile': 128\}, but its "
                                            r"make_impl does not take `options`"):
        build_impl(own, AttentionSpec(), CPU, "x", {"tile": 128})


def test_the_choices_to_check_are_the_defaults_then_each_other_choice_alone(registry):
    from mixboard.testing.conformance import choice_variants

    assert choice_variants(registry.backends["tiled_attn"].cls) == [{}, {"tile": 32}, {"tile": 128}, {"mode": "exact"}]
    assert choice_variants(registry.backends["plain_attn"].cls) == [{}]
