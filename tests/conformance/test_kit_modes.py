"""The quick and thorough modes: which cases each holds, what sizes they
reach, and every way to ask for the thorough one (run_suite, a suite
class, MIXBOARD_THOROUGH, mixboard check --thorough, pytest
--mixboard-thorough). Which cases run is what is checked here, so the
cases themselves run only where a test says so."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import mixboard
from mixboard.testing.conformance import ADAPTERS, ShortConvConformance, kind_cases, run_suite
from mixboard.testing.conformance import runner
from mixboard.testing.conformance.modes import ENV_VAR

SPECS = {"attention": mixboard.AttentionSpec, "mamba1": mixboard.Mamba1Spec, "mamba2": mixboard.Mamba2Spec,
         "short_conv": mixboard.ShortConvSpec}
LONG = {"prefill_4096", "long_chunked_prefill", "long_decode", "many_sequences_96"}


@pytest.fixture(autouse=True)
def no_mode_from_the_environment(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)


def cases_of(kind, thorough, dtype="float32"):
    return kind_cases(ADAPTERS[kind], SPECS[kind], dtype, 4, thorough=thorough, paged=kind == "attention")


@pytest.mark.parametrize("kind", sorted(SPECS))
def test_thorough_is_the_quick_cases_then_the_long_ones(kind):
    quick, thorough = cases_of(kind, False, "bfloat16"), cases_of(kind, True, "bfloat16")
    assert [c.id for c in thorough[:len(quick)]] == [c.id for c in quick]
    long = thorough[len(quick):]
    assert long and all(c.thorough for c in long) and not any(c.thorough for c in quick)
    assert {c.name for c in long} == LONG | {f"long-{i}" for i, _ in ADAPTERS[kind].long_shapes}
    assert len({c.id for c in thorough}) == len(thorough)


def largest(case):
    """(longest sequence, most sequences in one step, most decodes in one step beside a prefill)."""
    done, longest, widest, mixed = {}, 0, 0, 0
    for step in case.steps:
        decodes = sum(n == 1 and done.get(s, 0) > 0 for s, n in step)
        if decodes < len(step):
            mixed = max(mixed, decodes)
        for s, n in step:
            done[s] = done.get(s, 0) + n
        longest, widest = max(longest, *done.values()), max(widest, len(step))
    return longest, widest, mixed


def test_the_sizes_each_mode_reaches():
    quick = {c.name: largest(c) for c in cases_of("attention", False)}
    assert quick["many_sequences"][1:] == (40, 33)  # 33 decodes beside prefills in a step of 40
    assert quick["prefill_300"][0] > 256
    long = {c.name: largest(c) for c in cases_of("attention", True) if c.thorough}
    assert long["prefill_4096"][0] >= 4096 and long["long_chunked_prefill"][0] > 2048
    assert long["long_decode"][0] > 1024 and long["many_sequences_96"][1] == 96
    decode = next(c for c in cases_of("attention", True) if c.name == "long_decode")
    assert len(decode.steps) == 41 and all(n == 1 for step in decode.steps[1:] for _, n in step)


def test_every_head_size_real_models_use_is_swept():
    sizes = {c.spec.head_size for c in cases_of("attention", False) if c.name.startswith("shape-")}
    assert {64, 80, 96, 128, 192, 256} <= sizes
    real = [c.spec for c in cases_of("attention", False) if c.name == "prefill_300"]
    assert real[0].head_size == 128
    mamba2 = {c.name: c.spec for c in cases_of("mamba2", True)}
    assert mamba2["prefill_4096"].chunk_size == 256 and mamba2["prefill_4096"].d_state == 128
    assert mamba2["long-n_groups8"].n_groups == 8


def test_block_size_cases_come_only_with_paged_state():
    paged = {c.name: c.block_size for c in cases_of("attention", False) if c.name.startswith("block_size")}
    assert paged == {"block_size16": 16, "block_size7": 7}
    assert not [c for c in cases_of("mamba1", False) if c.name.startswith("block_size")]
    # the suite asks the backend's own state layout
    sdpa, mamba1 = runner.resolve("sdpa"), runner.resolve("mamba1_torch")
    assert runner.keeps_paged_state(sdpa, "float32") and not runner.keeps_paged_state(mamba1, "float32")
    assert "block_size16" not in {c.name for c in runner.suite_cases(mamba1, ["float32"], 4)}


@pytest.mark.parametrize("kind", sorted(SPECS))
def test_blocks_are_never_in_increasing_order_but_where_handed_out_in_order(kind):
    for case in cases_of(kind, True):
        for seq in case.seqs:
            if case.name in ("consecutive_slots", "strided_pools"):  # in order, the second over pools in pages
                assert list(seq.blocks) == sorted(seq.blocks)
            elif len(seq.blocks) > 1:
                assert list(seq.blocks) != sorted(seq.blocks), (case.id, seq)
    consecutive = next(c for c in cases_of(kind, False) if c.name == "consecutive_slots")
    slots = [consecutive.seq(s).slot for s, _ in consecutive.steps[-1]]
    assert slots == list(range(slots[0], slots[0] + len(slots))) and slots[0] > 1


@pytest.mark.parametrize("kind", sorted(SPECS))
def test_only_strided_pools_lays_pools_in_pages_and_pads_tables_with_a_real_block(kind):
    cases = cases_of(kind, True)
    strided = [c for c in cases if c.pools != "contiguous"]
    assert [c.name for c in strided] == ["strided_pools"]
    (case,) = strided
    assert case.steps == next(c for c in cases if c.name == "consecutive_slots").steps
    owned = {b for s in case.seqs for b in s.blocks}
    assert case.pad_block not in owned and case.pad_block > 0 and case.pad_block < case.num_blocks
    assert all(c.pad_block == 0 for c in cases if c is not case)


# --------------------------------------------------------------------------- asking for the thorough mode


@pytest.fixture
def ran(monkeypatch):
    """The case ids run_suite hands to run_case (each then passes without running)."""
    seen = []

    def record(target, case, *args, **kw):
        seen.append(case.id)
        return runner.CaseResult(case.id, runner.PASS, 0.0, 1e-5)

    monkeypatch.setattr(runner, "run_case", record)
    return seen


def test_run_suite_runs_the_long_cases_when_asked_or_when_the_environment_says(ran, monkeypatch):
    quick = {c.id for c in cases_of("short_conv", False)}
    thorough = {c.id for c in cases_of("short_conv", True)}
    assert not run_suite("short_conv_torch", "cpu", ("float32",)).thorough and set(ran) == quick
    ran.clear()
    assert run_suite("short_conv_torch", "cpu", ("float32",), thorough=True).thorough and set(ran) == thorough
    monkeypatch.setenv(ENV_VAR, "1")
    ran.clear()
    run_suite("short_conv_torch", "cpu", ("float32",))
    assert set(ran) == thorough
    ran.clear()
    run_suite("short_conv_torch", "cpu", ("float32",), thorough=False)  # asked: the environment does not override
    assert set(ran) == quick
    monkeypatch.setenv(ENV_VAR, "0")
    ran.clear()
    run_suite("short_conv_torch", "cpu", ("float32",))
    assert set(ran) == quick


def test_a_long_case_named_runs_in_the_quick_mode_and_may_be_declared_failing(ran):
    report = run_suite("short_conv_torch", "cpu", ("float32",), select=["long_decode"],
                       expected_failures={"prefill_4096": "not yet"})
    assert ran == ["long_decode[float32]"] and len(report.results) == 1


def test_a_suite_class_runs_them_with_thorough_true_or_when_the_run_asks(monkeypatch):
    class Quick(ShortConvConformance):
        backend, device, dtypes = "short_conv_torch", "cpu", ("float32",)
        expected_failures = {"long_decode": "a long case may be declared in either mode"}

    class Thorough(Quick):
        thorough = True

    def names(cases):
        return {case.name for case, _ in cases}

    assert not names(Quick.conformance_cases()) & LONG
    assert LONG <= names(Thorough.conformance_cases()) == names(Quick.conformance_cases(thorough=True))
    monkeypatch.setenv(ENV_VAR, "yes")
    assert LONG <= names(Quick.conformance_cases())


def test_mixboard_check_thorough(ran, capsys, monkeypatch):
    from mixboard_runner.cli import main

    assert main(["check", "short_conv_torch", "--dtype", "float32"]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith("; dtypes float32; quick mode")
    assert not set(ran) & {f"{n}[float32]" for n in LONG}
    ran.clear()
    assert main(["check", "short_conv_torch", "--dtype", "float32", "--thorough", "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert {f"{n}[float32]" for n in LONG} <= {r["case"] for r in records} == set(ran)
    assert all(set(r) == {"case", "status", "max_abs_error", "tolerance", "reason"} for r in records)
    ran.clear()
    monkeypatch.setenv(ENV_VAR, "1")
    assert main(["check", "short_conv_torch", "--dtype", "float32"]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith("; thorough mode")


def test_the_help_says_what_each_mode_covers(capsys):
    from mixboard_runner.cli import main

    with pytest.raises(SystemExit):
        main(["check", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for words in ("quick (the default", "40 sequences in a step", "blocks of 16 and 7 tokens",
                  "(64, 80, 96, 128, 192, 256)", "thorough (--thorough, or MIXBOARD_THOROUGH=1", "a 4096-token prompt",
                  "96 sequences in a step"):
        assert words in text, words


SUITE_FILE = '''
from mixboard.testing.conformance import ShortConvConformance


class TestMine(ShortConvConformance):
    backend = "short_conv_torch"
    dtypes = ("float32",)
'''


def collect(folder, *args) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MIXBOARD_", "PYTEST_"))}
    return subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", *args],
                            cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def collected(process: subprocess.Popen) -> list[str]:
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, out[-2000:] + err
    return [line for line in out.splitlines() if "::" in line]


def test_the_pytest_option_covers_the_plugin_and_every_suite_class_of_the_run(tmp_path):
    (tmp_path / "test_mine.py").write_text(SUITE_FILE)
    # a suite class and the plugin's items in one run (paths given beside --mixboard-backend are kept)
    both = ["test_mine.py", "--mixboard-backend", "short_conv_torch", "--mixboard-dtype", "float32"]
    runs = [collect(tmp_path, *both), collect(tmp_path, *both, "--mixboard-thorough")]  # at once
    for lines, thorough in zip(map(collected, runs), (False, True)):
        expected = len(cases_of("short_conv", thorough))
        assert len([line for line in lines if line.startswith("test_mine.py::TestMine::")]) == expected
        assert len([line for line in lines if "[short_conv_torch:" in line]) == expected
        assert any("prefill_4096[float32]" in line for line in lines) == thorough
