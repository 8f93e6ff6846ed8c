"""``mixboard check``: its JSON contract, its table, its exit statuses (0
nothing failed, 1 a case failed, 2 bad input, 5 every case skipped), through a subprocess against
the installed first-party backends and a vendor distribution with a bug."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from distfactory import write_distribution

VENDOR = '''
from mixboard import hookimpl
from mixboard_shortconv.torch_backend import ShortConvTorch
from mixboard_shortconv.torch_impl import ShortConvTorchImpl


class Doubling(ShortConvTorchImpl):
    def forward(self, *args):
        return super().forward(*args) * 2


class DoubledShortConv(ShortConvTorch):
    name = "short_conv_doubled"
    expected_failures = {"ragged_prefill[float32]": "doubles its output (known, fix in 0.2)"}

    @classmethod
    def make_impl(cls, spec, env):
        return Doubling(spec)


@hookimpl
def mixboard_backends():
    return [DoubledShortConv]
'''


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    target = tmp_path_factory.mktemp("site")
    write_distribution(target, "doubled-vendor", "0.1", {"doubled": "doubled_vendor"}, {"doubled_vendor.py": VENDOR})
    return target


def check(site, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MIXBOARD_")}
    env["PYTHONPATH"] = str(site)
    return subprocess.run([sys.executable, "-m", "mixboard_runner", "check", *args], capture_output=True, text=True,
                          env=env)


def test_json_contract_of_a_passing_backend(site):
    out = check(site, "short_conv_torch", "--device", "cpu", "--dtype", "float32", "--json")
    assert out.returncode == 0, out.stderr
    records = json.loads(out.stdout)
    assert len(records) == 22 and records[0]["case"] == "ragged_prefill[float32]"
    for r in records:
        assert set(r) == {"case", "status", "max_abs_error", "tolerance", "reason"}
        if r["case"].startswith("capture_"):  # it declares no capture: skipped, saying so
            assert r["status"] == "skip" and r["reason"].startswith("declares capture='never'")
            assert r["max_abs_error"] is None
            continue
        assert r["status"] == "pass" and r["reason"] is None and r["tolerance"] == 1e-5
        assert isinstance(r["max_abs_error"], float) and 0 <= r["max_abs_error"] <= 1e-5


def test_a_failing_backend_exits_1_with_declared_failures_as_xfail(site):
    out = check(site, "short_conv_doubled", "--dtype", "float32", "--case", "ragged_prefill", "--case", "isolation",
                "--json")
    assert out.returncode == 1
    xfail, fail = json.loads(out.stdout)
    assert xfail["case"] == "ragged_prefill[float32]" and xfail["status"] == "xfail"
    assert xfail["reason"].startswith("doubles its output (known, fix in 0.2) (failed as declared: step 1 of 1:")
    assert fail["case"] == "isolation[float32]" and fail["status"] == "fail"
    assert fail["max_abs_error"] > 0.1 and "|backend - oracle|" in fail["reason"]


def test_the_table_names_each_case_its_worst_error_and_the_totals(site):
    out = check(site, "short_conv_doubled", "--dtype", "float32", "-x")
    assert out.returncode == 1
    lines = out.stdout.splitlines()
    assert re.fullmatch(r"mixboard check short_conv_doubled on cpu \(cpu.*, torch .*\); dtypes float32; quick mode",
                        lines[0]), lines[0]
    assert lines[1].split() == ["case", "status", "max", "abs", "error", "tolerance", "reason"]
    assert lines[2].split()[:2] == ["ragged_prefill[float32]", "xfail"]
    assert lines[3].split()[:2] == ["decode_after_prefill[float32]", "fail"]  # -x: stops at the first failure
    assert lines[-1].startswith("0 passed, 1 failed, 0 skipped, 1 expected failures in ")
    assert out.stderr == "mixboard check: short_conv_doubled fails 1 case(s)\n"


def test_a_gpu_backend_here_is_skipped_with_its_reasons_and_exits_5_unless_allowed(site):
    out = check(site, "short_conv_cuda", "--json")
    assert out.returncode == 5, out.stderr
    assert out.stderr.startswith("mixboard check: short_conv_cuda ran no case on cuda: all 68 were skipped: device "
                                 "'cuda' is not available here: ")
    assert out.stderr.endswith("; --allow-skip accepts that\n") and out.stderr.count("\n") == 1
    allowed = check(site, "short_conv_cuda", "--json", "--allow-skip")
    assert allowed.returncode == 0 and allowed.stderr == "" and allowed.stdout == out.stdout
    records = json.loads(out.stdout)
    assert len(records) == 68 and {r["status"] for r in records} == {"skip"}  # 22 + 23 + 23
    assert all(r["max_abs_error"] is None for r in records)
    # (the wording of what torch sees is the environment's: "no CUDA device", or "no CUDA or ROCm device")
    assert re.match(r"device 'cuda' is not available here: torch sees no CUDA( or ROCm)? device; runs on cuda; "
                    r"this environment is cpu; needs Python module 'causal_conv1d'", records[0]["reason"])


@pytest.mark.parametrize("args, message", [
    (["short_conv_torh"], "unknown backend 'short_conv_torh'; did you mean 'short_conv_torch'?"),
    (["sdpa", "--device", "gpu"], "unknown device 'gpu'"),
    (["sdpa", "--case", "nope"], "--case nope names no case of 'sdpa'"),
    (["sdpa", "--dtype", "int8"], "argument --dtype: invalid choice: 'int8'"),
    (["sdpa", "--block-size", "0"], "--block-size must be at least 1"),
    (["rms_norm_torch", "--block-size", "16"], "--block-size applies to kinds with paged state; 'rms_norm_torch' "
                                               "serves the dense kind 'rms_norm', which keeps none"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, args, message):
    from mixboard_runner.cli import main

    try:  # in this process: the CLI's own main, without a subprocess's start-up per case
        status = main(["check", *args])
    except SystemExit as exc:  # argparse's errors
        status = exc.code
    out = capsys.readouterr()
    assert status == 2, (out.out, out.err)
    assert message in out.err and len(out.err.strip().splitlines()) == 1, out.err


def test_a_check_that_ran_nothing_is_not_a_pass(capsys):
    from mixboard_runner.cli import main

    assert main(["check", "sdpa", "--device", "cuda", "--case", "ragged_prefill"]) == 5  # no CUDA here
    err = capsys.readouterr().err
    assert re.fullmatch(r"mixboard check: sdpa ran no case on cuda: all 3 were skipped: device 'cuda' is not available "
                        r"here: torch sees no CUDA( or ROCm)? device; --allow-skip accepts that\n", err), err
    assert main(["check", "sdpa", "--device", "cuda", "--case", "ragged_prefill", "--allow-skip"]) == 0
    # (some cases skipped and the rest passing exits 0: test_kit_docs.py checks the page's two skips)
