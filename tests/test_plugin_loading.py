"""Plugin loading against real distributions: every fault is recorded with
plugin, distribution, version and cause, and the other plugins keep working."""

from __future__ import annotations

import sys

import pytest

from mixboard.errors import PluginError
from toy_sources import backend_class, plugin

GOOD = plugin(backend_class("Good", "good_attn", priority=5))


def _record(loaded, name):
    (record,) = [p for p in loaded.plugins if p.name == name]
    return record


def test_good_plugin_registers_with_its_distribution(distributions):
    distributions.add("acme-mixboard", "2.3.1", {"acme": "acme_plugin"}, {"acme_plugin.py": GOOD})
    loaded = distributions.load()
    entry = loaded.backends["good_attn"]
    assert (entry.plugin, entry.distribution, entry.version) == ("acme", "acme-mixboard", "2.3.1")
    record = _record(loaded, "acme")
    assert record.to_dict() == {"name": "acme", "distribution": "acme-mixboard", "version": "2.3.1",
                                "status": "ok", "error": None, "backends": ["good_attn"], "kinds": [], "devices": []}


def test_import_error_is_isolated(distributions):
    distributions.add("good-dist", "1.0", {"good": "good_plugin"}, {"good_plugin.py": GOOD})
    distributions.add("broken-dist", "0.9", {"broken": "broken_plugin"},
                      {"broken_plugin.py": "import flash_attn_2_cuda_missing_here\n"})
    loaded = distributions.load()
    assert "good_attn" in loaded.backends
    broken = _record(loaded, "broken")
    assert broken.status == "error" and broken.distribution == "broken-dist" and broken.version == "0.9"
    assert "ModuleNotFoundError" in broken.errors[0] and "flash_attn_2_cuda_missing_here" in broken.errors[0]


def test_plugin_that_exits_at_import_is_isolated(distributions):
    distributions.add("exits", "1.0", {"exits": "exits_plugin"}, {"exits_plugin.py": "raise SystemExit(3)\n"})
    distributions.add("good-dist", "1.0", {"good": "good_plugin"}, {"good_plugin.py": GOOD})
    loaded = distributions.load()
    assert "SystemExit" in _record(loaded, "exits").errors[0]
    assert "good_attn" in loaded.backends


def test_hook_that_raises_is_isolated(distributions):
    source = "from mixboard import hookimpl\n\n@hookimpl\ndef mixboard_backends():\n    raise RuntimeError('no licence')\n"
    distributions.add("raiser", "1.0", {"raiser": "raiser_plugin"}, {"raiser_plugin.py": source})
    distributions.add("good-dist", "1.0", {"good": "good_plugin"}, {"good_plugin.py": GOOD})
    loaded = distributions.load()
    assert "good_attn" in loaded.backends
    (error,) = _record(loaded, "raiser").errors
    assert "mixboard_backends() raised RuntimeError: no licence" in error


@pytest.mark.parametrize("item, expected", [
    ("'sdpa'", "not a mixboard.Backend subclass"),
    ("object", "not a mixboard.Backend subclass"),
    ("Good()", "not a mixboard.Backend subclass"),
])
def test_non_backend_items_are_left_out(distributions, item, expected):
    source = plugin(backend_class("Good", "good_attn"), returns=f"[Good, {item}]")
    distributions.add("mixed", "1.0", {"mixed": "mixed_plugin"}, {"mixed_plugin.py": source})
    loaded = distributions.load()
    record = _record(loaded, "mixed")
    assert record.status == "error" and expected in record.errors[0]
    assert list(loaded.backends) == ["good_attn"]  # the valid one still registers


def test_hook_returning_a_non_list(distributions):
    source = plugin(backend_class("Good", "good_attn"), returns="Good")
    distributions.add("single", "1.0", {"single": "single_plugin"}, {"single_plugin.py": source})
    loaded = distributions.load()
    assert "must return a list, not type" in _record(loaded, "single").errors[0]
    assert loaded.backends == {}


def test_same_backend_name_leaves_both_out_and_names_both(distributions):
    distributions.add("vendor-a", "1.0", {"a": "a_plugin"}, {"a_plugin.py": plugin(backend_class("A", "fast_attn"))})
    distributions.add("vendor-b", "2.0", {"b": "b_plugin"}, {"b_plugin.py": plugin(backend_class("B", "fast_attn"))})
    distributions.add("good-dist", "1.0", {"good": "good_plugin"}, {"good_plugin.py": GOOD})
    loaded = distributions.load()
    assert sorted(loaded.backends) == ["good_attn"]
    for name in ("a", "b"):
        (error,) = _record(loaded, name).errors
        assert "fast_attn" in error and "vendor-a 1.0" in error and "vendor-b 2.0" in error


def test_unsupported_api_version_says_which_are_supported(distributions):
    source = plugin(backend_class("Future", "future_attn", api_version=99), backend_class("Now", "now_attn"))
    distributions.add("future", "1.0", {"future": "future_plugin"}, {"future_plugin.py": source})
    loaded = distributions.load()
    (error,) = _record(loaded, "future").errors
    assert "plugin API version 99" in error and "supports 1" in error
    assert list(loaded.backends) == ["now_attn"]


def test_backend_of_unknown_kind(distributions):
    source = plugin(backend_class("Ret", "retnet", kind="retention"))
    distributions.add("ret", "1.0", {"ret": "ret_plugin"}, {"ret_plugin.py": source})
    loaded = distributions.load()
    assert "kind 'retention', which no installed plugin defines" in _record(loaded, "ret").errors[0]


def test_missing_declarations(distributions):
    source = "from mixboard import Backend, hookimpl\n\nclass Half(Backend):\n    name = 'half'\n    kind = 'attention'\n\n@hookimpl\ndef mixboard_backends():\n    return [Half]\n"
    distributions.add("half", "1.0", {"half": "half_plugin"}, {"half_plugin.py": source})
    (error,) = _record(distributions.load(), "half").errors
    assert "does not declare devices, dtypes, api_version" in error


def test_misspelled_hook_is_a_fault_with_a_hint(distributions):
    source = GOOD.replace("def mixboard_backends", "def mixboard_backend")
    distributions.add("typo", "1.0", {"typo": "typo_plugin"}, {"typo_plugin.py": source})
    (error,) = _record(distributions.load(), "typo").errors
    assert "unknown hook 'mixboard_backend'" in error and "did you mean 'mixboard_backends'" in error


def test_plugin_defined_kind_served_by_another_plugin(distributions):
    kind_source = """
from dataclasses import dataclass
from mixboard import Kind, MixerSpec, StateSpec, hookimpl

@dataclass(frozen=True)
class RetentionSpec(MixerSpec):
    num_heads: int = 4
    head_size: int = 32

class RetentionImpl:
    pass

@hookimpl
def mixboard_kinds():
    return [Kind(name="retention", spec=RetentionSpec, impl=RetentionImpl,
                 state_spec=lambda s: StateSpec.slots(kv=((s.num_heads, s.head_size, s.head_size), s.dtype)),
                 description="RetNet retention")]
"""
    distributions.add("retention-kind", "1.0", {"retention": "retention_kind"}, {"retention_kind.py": kind_source})
    distributions.add("retention-impl", "1.0", {"retimpl": "retention_impl"},
                      {"retention_impl.py": plugin(backend_class("Ret", "retention_torch", kind="retention"))})
    registry = distributions.registry()
    assert registry.faults == []
    selection = registry.select("retention", env=_cpu())
    assert selection.chosen.name == "retention_torch"
    assert selection.state_spec.layout == "slots"


def test_kind_name_clash_with_builtin(distributions):
    source = """
from mixboard import Kind, hookimpl
from mixboard.kinds import ATTENTION

@hookimpl
def mixboard_kinds():
    return [ATTENTION]
"""
    distributions.add("clash", "1.0", {"clash": "clash_plugin"}, {"clash_plugin.py": source})
    assert "built in" in _record(distributions.load(), "clash").errors[0]


def test_strict_mode_turns_a_fault_into_an_error(distributions, monkeypatch):
    distributions.add("broken", "1.0", {"broken": "broken_plugin"}, {"broken_plugin.py": "1/0\n"})
    monkeypatch.setenv("MIXBOARD_STRICT_PLUGINS", "1")
    with pytest.raises(PluginError, match="ZeroDivisionError"):
        distributions.load()


def test_allow_and_deny_lists(distributions, monkeypatch):
    distributions.add("a-dist", "1.0", {"a": "a_plugin"}, {"a_plugin.py": plugin(backend_class("A", "a_attn"))})
    distributions.add("b-dist", "1.0", {"b": "b_plugin"}, {"b_plugin.py": plugin(backend_class("B", "b_attn"))})
    monkeypatch.setenv("MIXBOARD_PLUGINS", "a")
    loaded = distributions.load()
    assert list(loaded.backends) == ["a_attn"] and _record(loaded, "b").status == "disabled"
    monkeypatch.delenv("MIXBOARD_PLUGINS")
    monkeypatch.setenv("MIXBOARD_DISABLE_PLUGINS", "a")
    loaded = distributions.load()
    assert list(loaded.backends) == ["b_attn"] and _record(loaded, "a").status == "disabled"
    assert "a_plugin" not in sys.modules  # a disabled plugin is never imported


def test_allow_list_with_an_unknown_name_is_not_silent(distributions, monkeypatch):
    distributions.add("a-dist", "1.0", {"a": "a_plugin"}, {"a_plugin.py": plugin(backend_class("A", "a_attn"))})
    monkeypatch.setenv("MIXBOARD_PLUGINS", "acme")
    loaded = distributions.load()
    assert "MIXBOARD_PLUGINS names 'acme'" in _record(loaded, "acme").errors[0]
    assert "installed: a" in _record(loaded, "acme").errors[0]


def test_requires_is_checked_without_importing(distributions):
    heavy = "import sys\nsys.modules['heavy_kernels_imported'] = True\n"
    source = plugin(backend_class("Heavy", "heavy_attn", requires=("heavy_kernels", "absent_kernels")))
    distributions.add("heavy", "1.0", {"heavy": "heavy_plugin"},
                      {"heavy_plugin.py": source, "heavy_kernels/__init__.py": heavy})
    registry = distributions.registry()
    from mixboard.selection import reasons_against

    reasons = reasons_against(registry.backends["heavy_attn"].cls, registry.make_spec("attention"), _cpu())
    assert reasons == ("needs Python module 'absent_kernels', which is not installed",)
    assert "heavy_kernels_imported" not in sys.modules


def test_result_does_not_depend_on_entry_point_order(distributions):
    for i in range(6):
        distributions.add(f"dist-{i}", "1.0", {f"p{i}": f"plug_{i}"},
                          {f"plug_{i}.py": plugin(backend_class(f"B{i}", f"attn_{i}", priority=i % 2))})
    from mixboard import Registry
    from mixboard.plugins import load

    eps = distributions.entry_points()
    choices = set()
    for order in (eps, eps[::-1], eps[2:] + eps[:2]):
        registry = Registry(load(order))
        choices.add((registry.select("attention", env=_cpu()).chosen.name, tuple(registry.backends)))
    assert choices == {("attn_1", ("attn_0", "attn_1", "attn_2", "attn_3", "attn_4", "attn_5"))}


def _cpu():
    from mixboard import simulate

    return simulate("cpu")
