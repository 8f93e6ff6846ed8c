"""A plugin describes an out-of-tree (privateuse1) device: simulated by name,
detected where torch has it, and its backends selected there. Real
distributions; detection through a real torch rename of privateuse1, done
by a device extension that torch itself autoloads (entry-point group
``torch.backends``), as out-of-tree vendors ship theirs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from distfactory import write_distribution

ACME = """
from mixboard import Backend, Device, hookimpl


class AcmeAttention(Backend):
    name = "acme_attn"
    kind = "attention"
    priority = 50
    devices = ("acme",)
    dtypes = ("float32",)
    api_version = 1

    @classmethod
    def check(cls, spec, env):
        return [] if env.arch == "acme3" else [f"needs an acme3; this device is {env.arch or 'of unknown arch'}"]


def _arch():
    import torch

    return torch.acme.arch_name()  # the vendor's module: only reached where torch has the device


@hookimpl
def mixboard_backends():
    return [AcmeAttention]


@hookimpl
def mixboard_devices():
    return [Device("acme", "Acme NPU through torch_acme (privateuse1)", archs=("acme2", "acme3"), arch=_arch,
                   runtime="acmert")]
"""

# What a vendor's torch extension does when torch autoloads it.
TORCH_ACME = """
import types


def autoload():
    import torch

    torch.utils.rename_privateuse1_backend("acme")
    module = types.ModuleType("torch_acme.device")
    module.is_available = lambda: True
    module.arch_name = lambda: "acme3"
    torch._register_device_module("acme", module)
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("site")
    write_distribution(root, "acme-mixboard", "1.2", {"acme": "acme_mixboard"}, {"acme_mixboard.py": ACME})
    info = write_distribution(root, "torch-acme", "0.1", {}, {"torch_acme.py": TORCH_ACME})
    (info / "entry_points.txt").write_text("[torch.backends]\nacme = torch_acme:autoload\n")
    return root


def mixboard(site, *args, torch_has_acme=False):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MIXBOARD_")}
    environ.update(PYTHONPATH=str(site), MIXBOARD_PLUGINS="acme,sdpa",
                   TORCH_DEVICE_BACKEND_AUTOLOAD="1" if torch_has_acme else "0")
    return subprocess.run([sys.executable, "-m", "mixboard_runner", *args], capture_output=True, text=True, env=environ)


def rows(out):
    assert out.returncode == 0, out.stderr
    return {b["name"]: b for b in json.loads(out.stdout)}


def test_plugin_device_is_simulated_by_name(site):
    acme = rows(mixboard(site, "backends", "--device", "acme", "--arch", "acme3", "--kind", "attention", "--json"))
    assert acme["acme_attn"]["available"] is True
    assert acme["acme_attn"]["environment"] == {**acme["acme_attn"]["environment"], "device": "acme",
                                                "capability": None, "runtime": "acmert", "arch": "acme3"}
    assert "runs on acme; this environment is cpu" in rows(mixboard(site, "backends", "--device", "cpu", "--json"))[
        "acme_attn"]["reasons"]
    older = rows(mixboard(site, "backends", "--device", "acme", "--arch", "acme2", "--json"))
    assert older["acme_attn"]["reasons"] == ["needs an acme3; this device is acme2"]
    out = mixboard(site, "select", "attention", "--device", "acme", "--arch", "acme3")
    assert out.returncode == 0 and out.stdout.startswith("attention -> acme_attn"), out.stderr
    text = mixboard(site, "backends", "--device", "acme").stdout
    assert "device acme (from a plugin): Acme NPU through torch_acme (privateuse1)" in text
    assert "describes device acme" in mixboard(site, "plugins").stdout


@pytest.mark.parametrize("args, message", [
    (["--device", "acme", "--arch", "acme9"], "unknown arch 'acme9' for device 'acme'; its archs: acme2, acme3"),
    (["--device", "acmee"], "unknown device 'acmee'; expected one of cpu, cuda, mps, xpu, hpu, mtia, npu, xla, meta, acme"),
    (["--device", "acme", "--capability", "9.0"], "--capability applies to device cuda, not 'acme'"),
])
def test_bad_plugin_device_flags_are_one_line(site, args, message):
    out = mixboard(site, "backends", *args)
    assert out.returncode == 2 and message in out.stderr and out.stderr.count("\n") == 1, out.stderr


def test_detected_where_torch_has_renamed_privateuse1(site):
    out = mixboard(site, "select", "attention", "--json", torch_has_acme=True)
    data = json.loads(out.stdout)
    assert out.returncode == 0, out.stderr
    assert data["chosen"] == "acme_attn"
    assert {k: data["environment"][k] for k in ("device", "runtime", "arch")} == {
        "device": "acme", "runtime": "acmert", "arch": "acme3"}
    # without the extension torch has no acme device: this machine is what it is
    out = mixboard(site, "select", "attention", "--json")
    assert json.loads(out.stdout)["environment"]["device"] != "acme"


def test_device_descriptions_are_checked(distributions):
    header = "from mixboard import Device, hookimpl\n\n@hookimpl\ndef mixboard_devices():\n    return "
    distributions.add("bad-cuda", "1.0", {"badcuda": "badcuda_plugin"},
                      {"badcuda_plugin.py": header + "[Device('cuda', 'my cuda')]\n"})
    distributions.add("not-a-device", "1.0", {"notdev": "notdev_plugin"}, {"notdev_plugin.py": header + "['acme']\n"})
    distributions.add("one", "1.0", {"one": "one_plugin"}, {"one_plugin.py": header + "[Device('npx', 'first')]\n"})
    distributions.add("two", "1.0", {"two": "two_plugin"}, {"two_plugin.py": header + "[Device('npx', 'second')]\n"})
    distributions.add("good", "1.0", {"good": "good_plugin"}, {"good_plugin.py": header + "[Device('npu', 'Ascend')]\n"})
    loaded = distributions.load()
    errors = {p.name: p.errors for p in loaded.plugins}
    assert "describes device 'cuda', which torch has natively" in errors["badcuda"][0]
    assert "returned 'acme', which is not a mixboard.Device" in errors["notdev"][0]
    assert "device 'npx' is registered by both" in errors["one"][0] and errors["two"]
    assert list(loaded.devices) == ["npu"] and loaded.devices["npu"].description == "Ascend"


def test_the_kit_knows_a_plugin_device_and_says_when_torch_lacks_it(site):
    out = mixboard(site, "check", "acme_attn", "--device", "acme")
    assert out.returncode == 5, out.stderr
    assert ("acme_attn ran no case on acme: all 29 were skipped: device 'acme' is not available here: torch has no "
            "such device in this process (is its torch extension installed?); --allow-skip") in out.stderr
    out = mixboard(site, "run", "demo", "--device", "acme")
    assert out.returncode == 2 and out.stderr == ("mixboard run: error: device 'acme' is not available here: torch "
                                                  "has no such device in this process (is its torch extension "
                                                  "installed?)\n")
    out = mixboard(site, "check", "acme_attn", "--device", "acmee")
    assert out.returncode == 2 and "unknown device 'acmee'" in out.stderr and out.stderr.count("\n") == 1
