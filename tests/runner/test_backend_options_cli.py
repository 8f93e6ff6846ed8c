"""Backend options from the command line, in a subprocess as a user runs it:
``--backend-option`` and $MIXBOARD_BACKEND_OPTIONS on explain, run and check,
``mixboard backends NAME``, and one clear line (status 2) for a bad option."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SDPA = ("--backend", "attention=sdpa")


def mixboard(*args, env=None):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MIXBOARD_")}
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "mixboard_runner", *args], capture_output=True, text=True,
                          env=environ)


def json_of(*args, env=None):
    out = mixboard(*args, env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_backends_name_shows_the_options_with_type_default_choices_and_doc():
    out = mixboard("backends", "linear_onednn")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "options (--backend-option linear_onednn.OPTION=VALUE, or $MIXBOARD_BACKEND_OPTIONS):" in lines
    (row,) = [line for line in lines if line.startswith("layout ")]
    assert row.split()[:5] == ["layout", "string", "packed", "packed,", "as_loaded,"]
    assert "how each weight is stored for the product" in row
    assert any(line.startswith("linear_onednn: torch's oneDNN product") for line in lines)  # its description

    (record,) = json_of("backends", "linear_onednn", "--json")
    assert record["name"] == "linear_onednn" and record["options"] == [{
        "name": "layout", "type": "string", "default": "packed", "choices": ["packed", "as_loaded", "column_major"],
        "minimum": None, "doc": record["options"][0]["doc"]}]
    (record,) = json_of("backends", "sdpa", "--json")
    assert [(o["name"], o["type"], o["default"], o["minimum"]) for o in record["options"]] == [
        ("decode_chunk_mib", "integer", 64, 1)]
    assert "sdpa_cpu declares no options." in mixboard("backends", "sdpa_cpu").stdout
    everyone = {b["name"]: b["options"] for b in json_of("backends", "--json")}
    assert everyone["sdpa_cpu"] == [] and everyone["linear_onednn"] == record_options("linear_onednn")


def record_options(name):
    (record,) = json_of("backends", name, "--json")
    return record["options"]


@pytest.mark.parametrize("args, message", [
    (("backends", "lnear_onednn"), "unknown backend 'lnear_onednn'; did you mean 'linear_onednn'?"),
    (("backends", "sdpa", "--kind", "linear"), "backend 'sdpa' serves attention, not linear"),
    (("explain", *SDPA, "--backend-option", "sdpa.decode_chunk_mib=0"),
     "backend option 'sdpa.decode_chunk_mib=0': decode_chunk_mib takes an integer of at least 1, not 0 (MiB of "
     "gathered keys"),
    (("explain", *SDPA, "--backend-option", "sdpa.chunk=4"), "sdpa has no option 'chunk'"),
    (("explain", *SDPA, "--backend-option", "sdpa=4"), "bad backend option 'sdpa=4': write BACKEND.OPTION=VALUE"),
    (("explain", "--backend", "attention=sdpa_cpu", "--backend-option", "sdpa.decode_chunk_mib=16"),
     "names backend 'sdpa', which no layer of this model runs: its attention layers run on sdpa_cpu"),
    (("run", "--max-tokens", "1", *SDPA, "--backend-option", "linear_onednn.layout=fast"),
     "layout takes one of packed, as_loaded, column_major, not 'fast'"),
    (("check", "linear_onednn", "--backend-option", "sdpa.decode_chunk_mib=16"),
     "--backend-option names backend 'sdpa', but this checks 'linear_onednn': give linear_onednn.OPTION=VALUE"),
    (("check", "linear_onednn", "--backend-option", "linear_onednn.layout=blocked"),
     "layout takes one of packed, as_loaded, column_major, not 'blocked'"),
    (("check", "linear_onednn", "--each-choice", "--backend-option", "linear_onednn.layout=packed"),
     "--each-choice runs every choice in turn: give it without --backend-option"),
])
def test_a_bad_option_is_one_line_and_status_2(args, message):
    out = mixboard(*args)
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1 and not out.stdout


def test_explain_takes_the_flag_or_the_variable_and_the_fingerprint_follows_the_values():
    default = json_of("explain", *SDPA, "--json")
    assert default["options"]["sdpa"] == {"decode_chunk_mib": 64}
    explicit = json_of("explain", *SDPA, "--backend-option", "sdpa.decode_chunk_mib=64", "--json")
    flag = json_of("explain", *SDPA, "--backend-option", "sdpa.decode_chunk_mib=16", "--json")
    variable = json_of("explain", *SDPA, "--json", env={"MIXBOARD_BACKEND_OPTIONS": "sdpa.decode_chunk_mib=16"})
    assert flag["options"]["sdpa"] == variable["options"]["sdpa"] == {"decode_chunk_mib": 16}
    assert default["fingerprint"] == explicit["fingerprint"] != flag["fingerprint"] == variable["fingerprint"]
    assert default["mixer_fingerprint"] != flag["mixer_fingerprint"]
    # the flag replaces the variable, as --backend replaces $MIXBOARD_BACKEND
    replaced = json_of("explain", *SDPA, "--backend-option", "sdpa.decode_chunk_mib=32", "--json",
                       env={"MIXBOARD_BACKEND_OPTIONS": "sdpa.decode_chunk_mib=16"})
    assert replaced["options"]["sdpa"] == {"decode_chunk_mib": 32}


def test_the_flag_repeats_and_each_may_hold_several():
    both = ("--backend", "attention=sdpa,linear=linear_onednn")
    repeated = json_of("explain", *both, "--backend-option", "sdpa.decode_chunk_mib=8", "--backend-option",
                       "linear_onednn.layout=as_loaded", "--json")
    joined = json_of("explain", *both, "--backend-option", "sdpa.decode_chunk_mib=8,linear_onednn.layout=as_loaded",
                     "--json")
    assert repeated["options"] == joined["options"] == {"linear_onednn": {"layout": "as_loaded"},
                                                        "sdpa": {"decode_chunk_mib": 8}}
    text = mixboard("explain", *both, "--backend-option", "sdpa.decode_chunk_mib=8")
    assert "backend options: linear_onednn.layout=packed, sdpa.decode_chunk_mib=8" in text.stdout  # defaults too


def test_run_generates_the_same_tokens_with_an_option_set():
    args = ("run", "--prompt-ids", "72,105,33", "--max-tokens", "4", *SDPA, "--json")
    default = json_of(*args)
    small = json_of(*args, "--backend-option", "sdpa.decode_chunk_mib=1")
    assert small["plan"]["options"]["sdpa"] == {"decode_chunk_mib": 1}
    assert small["outputs"] == default["outputs"]


def test_check_runs_the_kit_on_the_value_given():
    out = mixboard("check", "linear_onednn", "--case", "rows", "--backend-option", "linear_onednn.layout=as_loaded")
    assert out.returncode == 0, out.stderr
    assert "options linear_onednn.layout=as_loaded" in out.stdout.splitlines()[0]
    # a check names what it checks: the variable does not change it
    out = mixboard("check", "linear_onednn", "--case", "rows",
                   env={"MIXBOARD_BACKEND_OPTIONS": "sdpa.decode_chunk_mib=1"})
    assert out.returncode == 0 and "options linear_onednn.layout=packed" in out.stdout.splitlines()[0]


def test_check_each_choice_runs_the_cases_on_every_layout_in_turn():
    records = json_of("check", "linear_onednn", "--case", "rows", "--each-choice", "--json")
    assert [(r["case"], r["options"], r["status"]) for r in records] == [
        ("rows[float32]", {"layout": layout}, "pass") for layout in ("packed", "as_loaded", "column_major")]
    out = mixboard("check", "linear_onednn", "--case", "rows", "--each-choice")
    assert out.returncode == 0, out.stderr
    headers = [line for line in out.stdout.splitlines() if line.startswith("mixboard check linear_onednn")]
    assert [h.rsplit("layout=", 1)[1] for h in headers] == ["packed", "as_loaded", "column_major"]
    # a backend without options: its defaults alone, once
    assert len(json_of("check", "sdpa_cpu", "--case", "ragged_prefill", "--dtype", "float32", "--each-choice",
                       "--json")) == 1
