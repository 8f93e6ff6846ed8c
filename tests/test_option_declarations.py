"""A backend's options declaration, checked by the plugin loader against real
distributions: a malformed one is a plugin fault (the backend left out, the
cause recorded), the plugin's other backends keep working."""

from __future__ import annotations

import pytest

from mixboard import Option, OptionValues
from toy_sources import backend_class, plugin

GOOD_OPTIONS = """
    options = (Option("tile", int, 64, "keys per tile", choices=(32, 64, 128)),
               Option("split", bool, True, "split long sequences"))
"""


def _load(distributions, declaration: str):
    source = plugin(backend_class("Bad", "bad_attn", extra=declaration), backend_class("Good", "good_attn"))
    source = source.replace("from mixboard import Backend, hookimpl", "from mixboard import Backend, Option, hookimpl")
    distributions.add("acme-opts", "1.0", {"acme": "acme_opts"}, {"acme_opts.py": source})
    loaded = distributions.load()
    (record,) = [p for p in loaded.plugins if p.name == "acme"]
    return loaded, record


def test_a_valid_declaration_registers(distributions):
    loaded, record = _load(distributions, GOOD_OPTIONS)
    assert record.status == "ok" and record.errors == []
    assert [o.name for o in loaded.backends["bad_attn"].cls.options] == ["tile", "split"]


@pytest.mark.parametrize("declaration, cause", [
    ('    options = [Option("tile", int, 64, "keys per tile")]',
     "backend 'bad_attn': options must be a tuple of mixboard.Option, not list"),
    ('    options = ("tile",)', "backend 'bad_attn': options[0] is 'tile', not a mixboard.Option"),
    ('    options = (Option("tile", int, 64, "a"), Option("tile", int, 32, "b"))',
     "backend 'bad_attn': option 'tile' is declared twice"),
    ('    options = (Option("tile", int, "64", "keys per tile"),)',
     "backend 'bad_attn': option 'tile': default '64' is not allowed: takes an integer, not '64'"),
    ('    options = (Option("tile", int, True, "keys per tile"),)',
     "option 'tile': default True is not allowed: takes an integer, not True"),
    ('    options = (Option("tile", int, 48, "keys per tile", choices=(32, 64)),)',
     "option 'tile': default 48 is not allowed: takes one of 32, 64, not 48"),
    ('    options = (Option("tile", int, 64, "keys per tile", choices=(32, "64")),)',
     "option 'tile': choice '64' is not of its type (integer)"),
    ('    options = (Option("tile", int, 64, "keys per tile", choices=[32, 64]),)',
     "option 'tile': choices must be a non-empty tuple"),
    ('    options = (Option("split", bool, True, "split", choices=(True, False)),)',
     "option 'split': choices are for str and int options"),
    ('    options = (Option("tile", int, 8, "keys per tile", minimum=16),)',
     "option 'tile': default 8 is not allowed: takes an integer of at least 16, not 8"),
    ('    options = (Option("mode", str, "a", "how", minimum=1),)',
     "option 'mode': minimum is for int and float options without choices"),
    ('    options = (Option("tile", list, [], "keys per tile"),)',
     "option 'tile': type must be bool, int, float or str"),
    ('    options = (Option("tile", int, 64, "keys\\nper tile"),)', "option 'tile': doc must be one line"),
    ('    options = (Option("tile", int, 64, ""),)', "option 'tile': doc must be one line"),
    ('    options = (Option("2x", int, 64, "twice"),)', "option '2x': its name must be an identifier"),
    ('    options = (Option("mode", str, "", "how"),)', "option 'mode': default '' is not allowed"),
    ('    options = (Option("scale", float, float("inf"), "how much"),)',
     "option 'scale': default inf is not allowed: takes a finite number"),
])
def test_a_malformed_declaration_is_a_plugin_fault(distributions, declaration, cause):
    loaded, record = _load(distributions, declaration)
    assert record.status == "error"
    assert any(cause in e for e in record.errors), record.errors
    assert "bad_attn" not in loaded.backends and "good_attn" in loaded.backends  # the plugin's others are kept


def test_strict_plugins_turns_a_bad_declaration_into_an_error(distributions, monkeypatch):
    from mixboard.errors import PluginError

    monkeypatch.setenv("MIXBOARD_STRICT_PLUGINS", "1")
    with pytest.raises(PluginError, match="options must be a tuple"):
        _load(distributions, '    options = [Option("tile", int, 64, "keys per tile")]')


def test_an_option_is_immutable_and_compares_by_value():
    a = Option("tile", int, 64, "keys per tile", choices=(32, 64))
    assert a == Option("tile", int, 64, "keys per tile", choices=(32, 64)) and hash(a) == hash(
        Option("tile", int, 64, "keys per tile", choices=(32, 64)))
    assert a != Option("tile", int, 32, "keys per tile", choices=(32, 64))
    with pytest.raises(AttributeError, match="immutable"):
        a.default = 32
    assert a.to_dict() == {"name": "tile", "type": "integer", "default": 64, "doc": "keys per tile",
                           "choices": [32, 64], "minimum": None}


def test_values_are_read_only_by_name_and_by_key():
    values = OptionValues({"tile": 64, "split": True})
    assert values.tile == values["tile"] == 64 and dict(values) == {"tile": 64, "split": True}
    with pytest.raises(AttributeError, match="read-only"):
        values.tile = 32
    with pytest.raises(TypeError):
        values["tile"] = 32
    with pytest.raises(AttributeError, match="no option 'tiles' \\(options: tile, split\\)"):
        values.tiles
    assert hash(values) == hash(OptionValues({"split": True, "tile": 64}))
