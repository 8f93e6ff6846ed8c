"""docs/json.md documents the JSON of every command key by key; this runs
every command with ``--json`` and checks that the keys it prints are
exactly the documented ones (an optional key may be absent), with values
of the documented types. A key added to a command without a line on the
page, or a line for a key no command prints, fails here."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from distfactory import write_distribution
from mixboard_runner.cli import build_parser

PAGE = Path(__file__).resolve().parents[1] / "docs" / "json.md"
ENVIRONMENT = "The environment object"
LOCK_FILE = "The lock file"

# Each section of the page, and the runs (arguments, expected exit status) that must print exactly its keys.
RUNS = {
    "mixboard plugins --json": [(["plugins", "--json"], 0), (["plugins", "--json"], 0, "vendor")],
    "mixboard backends --json": [
        (["backends", "--json"], 0),
        (["backends", "--device", "cuda", "--capability", "9.0", "--dtype", "bfloat16", "--json"], 0),
        (["backends", "linear_onednn", "--json"], 0),
    ],
    "mixboard select --json": [
        (["select", "attention", "--json"], 0),
        (["select", "mamba2", "--spec", "dt_max=inf", "--backend", "mamba2=mamba2_torch", "--json"], 0),
    ],
    "mixboard select --json, when no backend can serve the layer": [
        (["select", "attention", "--backend", "attention=flash_attn", "--json"], 1),
    ],
    "mixboard explain --json": [
        (["explain", "--json"], 0),
        (["explain", "--backend", "attention=sdpa", "--device", "cuda", "--capability", "9.0", "--json"], 0),
        (["explain", "--backend", "attention@decode=sdpa", "--json"], 0),
        (["explain", "--backend", "attention=sdpa", "--backend-option", "sdpa.decode_chunk_mib=16", "--json"], 0),
    ],
    "mixboard run --json": [
        (["run", "--max-tokens", "2", "--json"], 0),
        (["run", "--max-tokens", "2", "--backend", "attention@decode=sdpa", "--json"], 0),
        (["run", "--max-tokens", "2", "--backend", "attention=sdpa", "--backend-option", "sdpa.decode_chunk_mib=16",
          "--json"], 0),
    ],
    "mixboard lock --json": [(["lock", "--force", "-o", os.devnull, "--json"], 0)],
    "mixboard tune --json": [(["tune", "--kinds", "argmax,rotary,short_conv", "--budget", "0.01", "--prompt", "8",
                               "--batch", "2", "--context", "8", "--force", "-o", os.devnull, "--json",
                               "--backend-option", "linear_onednn.layout=as_loaded"], 0)],
    "mixboard explain --json and mixboard run --json, when no backend can serve a layer": [
        (["explain", "--backend", "attention=flash_attn", "--json"], 1),
        (["run", "--backend", "attention=flash_attn", "--max-tokens", "1", "--json"], 1),
    ],
    "mixboard check --json": [
        (["check", "short_conv_torch", "--case", "ragged_prefill", "--json"], 0),
        (["check", "flash_attn", "--case", "ragged_prefill", "--allow-skip", "--json"], 0),
        (["check", "linear_onednn", "--case", "rows", "--each-choice", "--json"], 0),
    ],
}
# A run marked "vendor" also sees this plugin (beside the first-party ones): it defines a kind and describes
# a device, which no first-party plugin does, so that `plugins --json` prints its `kinds` and `devices` items.
VENDOR = """
from dataclasses import dataclass

from mixboard import Device, Kind, MixerSpec, StateSpec, hookimpl
from mixboard.kinds import MixerImpl


@dataclass(frozen=True)
class EchoSpec(MixerSpec):
    width: int = 4


class EchoImpl(MixerImpl):
    def forward(self, x, state, meta):
        return x.clone()


@hookimpl
def mixboard_kinds():
    return [Kind("echo", EchoSpec, EchoImpl, lambda spec: StateSpec.slots(h=((spec.width,), spec.dtype)),
                 "returns its input")]


@hookimpl
def mixboard_devices():
    return [Device("acme", "Acme NPU through torch_acme (privateuse1)", archs=("acme2", "acme3"), runtime="acmert")]
"""
TYPES = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,), "null": (type(None),),
         "list": (list,), "object": (dict,), "scalar": (str, int, float, bool, type(None))}


def sections() -> dict[str, dict[str, tuple[set[str], bool]]]:
    """Every table of the page: its heading -> {key path: (allowed types, optional)}."""
    text = PAGE.read_text()
    out = {}
    for heading, body in re.findall(r"^#+ ([^\n]+)\n(.*?)(?=^#+ |\Z)", text, re.M | re.S):
        rows = re.findall(r"^\| `([^`]+)` \| ([^|]+) \|", body, re.M)
        if not rows:
            continue
        table = {}
        for key, kinds in rows:
            words = kinds.strip()
            optional = words.endswith(", optional")
            names = set(re.split(r",? or |, ", words.removesuffix(", optional")))
            table[key] = (names, optional)
        out[heading.strip().strip("`").replace("`", "")] = table
    return out


def documented(table: dict, environment: dict) -> dict[str, tuple[set[str], bool]]:
    """A table with every 'environment' key expanded into the environment object's keys."""
    out = {}
    for key, (names, optional) in table.items():
        if names == {"environment"}:
            out[key] = ({"object"}, optional)
            out.update({f"{key}.{sub}": value for sub, value in environment.items()})
        else:
            out[key] = (names, optional)
    return out


def produced(value, documented_keys: set[str], path: str = "") -> list[tuple[str, object]]:
    """(key path, value) of every key and list item in ``value``; a key under an object the page
    documents with ``.<word>`` takes that placeholder's name."""
    out = []
    if isinstance(value, dict):
        wild = {k[len(path) + 1:].split(".")[0].split("[")[0] for k in documented_keys
                if path and k.startswith(path + ".<")} or {k.split(".")[0].split("[")[0] for k in documented_keys
                                                          if not path and k.startswith("<")}
        for key, item in value.items():
            name = next(iter(wild)) if wild else key
            child = f"{path}.{name}" if path else name
            out.append((child, item))
            out.extend(produced(item, documented_keys, child))
    elif isinstance(value, list):
        for item in value:
            out.append((f"{path}[]", item))
            out.extend(produced(item, documented_keys, f"{path}[]"))
    return out


def _type_ok(value, names: set[str]) -> bool:
    if isinstance(value, bool):
        return "boolean" in names or "scalar" in names
    return any(isinstance(value, TYPES[n]) for n in names)


@pytest.fixture(scope="module")
def vendor_site(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("vendor")
    write_distribution(site, "acme-json", "0.1", {"acme_json": "acme_json"}, {"acme_json.py": VENDOR})
    return site


def _run(args: list[str], status: int, site: Path | None = None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MIXBOARD_")}
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [env.get("PYTHONPATH")])])
    out = subprocess.run([sys.executable, "-m", "mixboard_runner", *args], capture_output=True, text=True, env=env)
    assert out.returncode == status, (args, out.returncode, out.stderr[-2000:])
    return json.loads(out.stdout)


def test_the_page_has_a_section_for_every_command_with_json():
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # noqa: SLF001 - argparse keeps them there
    with_json = {name for name, sub in commands.items() if any("--json" in a.option_strings for a in sub._actions)}
    assert with_json == {"plugins", "backends", "select", "explain", "run", "check", "lock", "tune"}
    titles = set(sections())
    for name in with_json:
        assert f"mixboard {name} --json" in titles, name
    assert set(RUNS) | {ENVIRONMENT, LOCK_FILE} == titles, "each table of the page needs runs here, and each run a table"


@pytest.mark.parametrize("title", list(RUNS))
def test_the_keys_printed_are_the_keys_documented(title, vendor_site):
    tables = sections()
    table = documented(tables[title], tables[ENVIRONMENT])
    keys = set(table)
    seen: set[str] = set()
    for args, status, *vendor in RUNS[title]:
        for key, value in produced(_run(args, status, vendor_site if vendor else None), keys):
            assert key in table, f"`mixboard {' '.join(args)}` prints {key!r}, which docs/json.md does not document"
            assert _type_ok(value, table[key][0]), f"{key} is {value!r}; docs/json.md says {table[key][0]}"
            seen.add(key)
    never = {k for k, (_, optional) in table.items() if not optional} - seen
    assert not never, f"docs/json.md documents keys that no run prints: {sorted(never)}"


def test_the_lock_file_has_the_keys_documented(tmp_path):
    tables = sections()
    table = documented(tables[LOCK_FILE], tables[ENVIRONMENT])
    locked, tuned = tmp_path / "split.lock", tmp_path / "tuned.lock"
    _run(["lock", "--backend", "attention@decode=sdpa", "-o", str(locked), "--json"], 0)
    _run(["tune", "--kinds", "argmax", "--budget", "0.01", "--prompt", "8", "--batch", "2", "--context", "8",
          "-o", str(tuned), "--json"], 0)
    seen = set()
    for path in (locked, tuned):
        for key, value in produced(json.loads(path.read_text()), set(table)):
            assert key in table, f"the lock file holds {key!r}, which docs/json.md does not document"
            assert _type_ok(value, table[key][0]), f"{key} is {value!r}; docs/json.md says {table[key][0]}"
            seen.add(key)
    never = {k for k, (_, optional) in table.items() if not optional} - seen
    assert not never, f"docs/json.md documents keys that no lock holds: {sorted(never)}"


def test_plugins_json_gives_the_kinds_and_devices_a_plugin_adds(vendor_site):
    records = {r["name"]: r for r in _run(["plugins", "--json"], 0, vendor_site)}
    assert records["acme_json"] == {
        "name": "acme_json", "distribution": "acme-json", "version": "0.1", "status": "ok", "error": None,
        "backends": [], "kinds": ["echo"],
        "devices": [{"name": "acme", "description": "Acme NPU through torch_acme (privateuse1)",
                     "archs": ["acme2", "acme3"], "runtime": "acmert"}]}
    assert records["sdpa"]["kinds"] == [] and records["sdpa"]["devices"] == []  # the built-in kinds are core's


def test_an_optional_key_appears_when_its_table_says():
    """``block_multiple`` (explain, run): present only for a backend whose blocks must be a multiple of N."""
    from mixboard import StateSpec

    assert "block_multiple" not in StateSpec.paged(k=((2, 4), "float32")).to_dict()
    assert StateSpec.paged(block_multiple=256, k=((2, 4), "float32")).to_dict()["block_multiple"] == 256


def test_help_of_every_command_with_json_points_to_the_page():
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # noqa: SLF001
    for name, sub in commands.items():
        if any("--json" in a.option_strings for a in sub._actions):
            assert "docs/json.md" in sub.format_help(), name


def test_the_plugins_table_says_what_the_json_says(vendor_site):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MIXBOARD_")}
    env["PYTHONPATH"] = os.pathsep.join([str(vendor_site), *filter(None, [env.get("PYTHONPATH")])])
    out = subprocess.run([sys.executable, "-m", "mixboard_runner", "plugins"], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert "acme_json: defines kind echo" in out.stdout
    assert "acme_json: describes device acme: Acme NPU through torch_acme (privateuse1)" in out.stdout
