"""mixboard.Declaration: a backend's facts in one record, loaded from real distributions the same as
the attribute form, derived per backend from a plugin's shared facts, and refused when malformed."""

from __future__ import annotations

import pytest

from mixboard import Backend, Declaration
from mixboard.declaration import FACTS
from toy_sources import backend_class, plugin

SHARED = "PLUGIN = Declaration(kind='attention', devices=('cpu',), dtypes=('float32',), api_version=1)\n"
DECLARED = plugin(
    "from mixboard import Declaration, Option\n" + SHARED + """
class Fast(Backend):
    declaration = PLUGIN(name='fast_attn', priority=7, description='fast',
                         options=(Option('tile', int, 16, 'rows per tile', minimum=1),))

class Slow(Backend):
    declaration = PLUGIN(name='slow_attn', priority=2)
""", returns="[Fast, Slow]")

FACT_NAMES = [f for f in FACTS if f != "options"]


def facts(cls) -> dict:
    return {f: getattr(cls, f) for f in FACT_NAMES} | {"options": [o.to_dict() for o in cls.options]}


def test_declared_backends_load_like_the_attribute_form(distributions):
    distributions.add("declared", "1.0", {"declared": "declared_plugin"}, {"declared_plugin.py": DECLARED})
    twin = backend_class("Twin", "twin_attn", priority=2, devices=("cpu",), dtypes=("float32",))
    distributions.add("attrs", "1.0", {"attrs": "attrs_plugin"}, {"attrs_plugin.py": plugin(twin)})
    loaded = distributions.load()
    assert not loaded.faults
    fast, slow, twin_cls = (loaded.backends[n].cls for n in ("fast_attn", "slow_attn", "twin_attn"))
    assert (fast.priority, fast.devices, fast.description, fast.options[0].name) == (7, ("cpu",), "fast", "tile")
    # the shared facts reach both; what one backend adds stays its own
    assert slow.devices == fast.devices and slow.options == () and slow.description != "fast"
    # a declared backend and its attribute-form twin state the same facts
    assert facts(slow) | {"name": None} == facts(twin_cls) | {"name": None}


def test_deriving_leaves_the_shared_record_as_it_was():
    shared = Declaration(devices=("cpu",), priority=3)
    one = shared(name="one", priority=9)
    assert shared.facts == {"devices": ("cpu",), "priority": 3}
    assert one.facts == {"devices": ("cpu",), "priority": 9, "name": "one"}
    with pytest.raises(TypeError):
        shared.facts["priority"] = 4  # read-only


def test_an_unknown_fact_is_refused_with_a_suggestion():
    with pytest.raises(TypeError, match=r"no fact 'priorty'.*did you mean 'priority'"):
        Declaration(priorty=5)


def test_a_fact_stated_twice_is_refused():
    with pytest.raises(TypeError, match="sets priority as class attributes beside its declaration"):
        class Twice(Backend):  # noqa: F841
            declaration = Declaration(name="twice", kind="attention", devices=("*",), dtypes=("float32",),
                                      api_version=1)
            priority = 4


def test_a_declaration_must_be_a_declaration():
    with pytest.raises(TypeError, match="must be a mixboard.Declaration, not dict"):
        class Wrong(Backend):  # noqa: F841
            declaration = {"name": "wrong"}


def test_a_plugin_whose_declaration_is_malformed_is_a_fault_the_others_survive(distributions):
    bad = plugin("from mixboard import Declaration\n\nclass Bad(Backend):\n    declaration = Declaration(nmae='x')\n")
    distributions.add("bad", "1.0", {"bad": "bad_plugin"}, {"bad_plugin.py": bad})
    distributions.add("declared", "1.0", {"declared": "declared_plugin"}, {"declared_plugin.py": DECLARED})
    loaded = distributions.load()
    assert "fast_attn" in loaded.backends
    assert any("no fact 'nmae'" in fault and "did you mean 'name'" in fault for fault in loaded.faults), loaded.faults


def test_every_first_party_backend_states_its_facts_in_a_declaration():
    """The house rule (issue 33): one way to declare a backend, in every plugin."""
    from mixboard import get_registry
    from mixboard.declaration import declared_by

    attribute_form = sorted(name for name, entry in get_registry().backends.items() if declared_by(entry.cls) is None)
    assert attribute_form == [], f"state these backends' facts in a mixboard.Declaration: {attribute_form}"

