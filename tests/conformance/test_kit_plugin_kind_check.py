"""A kind an installed plugin defines is served by ``mixboard check`` and
``pytest --mixboard-backend`` once its Kind names its conformance adapter
(``conformance="module:NAME"``), and listing backends never imports it.
(The kit's verdicts on plugin kinds are tested in test_kit_plugin_kind.py;
this is the plumbing, through a real distribution in subprocesses.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from distfactory import write_distribution

PLUGIN = '''
from dataclasses import dataclass

from mixboard import Backend, Kind, MixerSpec, StateSpec, hookimpl
from mixboard.kinds.base import MixerImpl


@dataclass(frozen=True)
class DecaySpec(MixerSpec):
    channels: int = 8
    decay: float = 0.5


class DecayImpl(MixerImpl):
    def forward(self, x, state, meta):
        """x: [T, channels]; state: acc [num_slots, channels]. y_t = decay * y_(t-1) + x_t."""


DECAY = Kind("decay_sum", DecaySpec, DecayImpl, lambda spec: StateSpec.slots(acc=((spec.channels,), spec.dtype)),
             "running decayed sum", conformance="decay_vendor.conformance:DECAY")


class DecayTorch(Backend):
    name = "decay_torch"
    kind = "decay_sum"
    devices = ("*",)
    dtypes = ("float32",)
    api_version = 1

    @classmethod
    def make_impl(cls, spec, env):
        from decay_vendor.impl import DecayLoop

        return DecayLoop(spec)


@hookimpl
def mixboard_kinds():
    return [DECAY]


@hookimpl
def mixboard_backends():
    return [DecayTorch]
'''

IMPL = '''
import torch

from decay_vendor.plugin import DecayImpl


class DecayLoop(DecayImpl):
    def __init__(self, spec):
        self.spec = spec

    def forward(self, x, state, meta):
        out, pool = torch.empty_like(x), state["acc"]
        qsl, ctx = meta.query_start_loc_cpu.tolist(), meta.context_lens_cpu.tolist()
        for i, slot in enumerate(meta.state_slots_cpu.tolist()):
            s = pool[slot].clone() if ctx[i] else torch.zeros_like(pool[slot])
            for t in range(qsl[i], qsl[i + 1]):
                s = self.spec.decay * s + x[t]
                out[t] = s
            pool[slot] = s
        return out
'''

CONFORMANCE = '''
from mixboard.testing.conformance import KindAdapter

from decay_vendor.impl import DecayLoop

DECAY = KindAdapter(kind="decay_sum", base=dict(channels=8), inputs=lambda spec: {"x": ((spec.channels,), 1.0)},
                    oracle=DecayLoop, shapes=(("wide", dict(channels=24)),))
'''


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    write_distribution(site, "decay-vendor", "0.1", {"decay": "decay_vendor.plugin"},
                       {"decay_vendor/__init__.py": "", "decay_vendor/plugin.py": PLUGIN,
                        "decay_vendor/impl.py": IMPL, "decay_vendor/conformance.py": CONFORMANCE})
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MIXBOARD_", "PYTEST_"))}
    env["PYTHONPATH"] = str(site)
    env["MIXBOARD_STRICT_PLUGINS"] = "1"
    return env


def run(env, *args, cwd=None):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=cwd)


def test_mixboard_check_serves_a_plugin_kind(env):
    out = run(env, "-m", "mixboard_runner", "check", "decay_torch", "--json")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr
    records = json.loads(out.stdout)
    assert len(records) == 15 and records[-3]["case"] == "shape-wide[float32]"
    # every case passes, but the capture cases, skipped: the backend declares no capture (mixboard.capture)
    assert {r["case"] for r in records if r["status"] != "pass"} == {"capture_decode[float32]", "capture_mixed[float32]"}
    assert {r["status"] for r in records if r["case"].startswith("capture_")} == {"skip"}


def test_the_pytest_plugin_serves_it_too(env, tmp_path):
    out = run(env, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--mixboard-backend", "decay_torch", cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-2000:]
    assert "13 passed, 2 skipped" in out.stdout


def test_listing_backends_does_not_import_the_adapter(env):
    code = ("import sys; from mixboard import get_registry; assert 'decay_torch' in get_registry().backends; "
            "print('decay_vendor.conformance' in sys.modules, 'mixboard.testing.conformance' in sys.modules)")
    out = run(env, "-c", code)
    assert out.stdout.split() == ["False", "False"], out.stdout + out.stderr
