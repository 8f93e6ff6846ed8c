"""A kind a plugin defines gets a conformance suite too: the plugin describes
it with a KindAdapter (its oracle, its inputs, its shapes) and the kit runs
every case (ragged batches, chunks, decodes, isolation, strided inputs,
shared metadata) against its backends."""

from __future__ import annotations

import re
from abc import abstractmethod
from dataclasses import dataclass

import pytest
import torch

from mixboard import Backend, Kind, MixerSpec, Registry, StateSpec, UsageError
from mixboard.kinds.base import MixerImpl
from mixboard.testing.conformance import KindAdapter, conformance_suite, run_suite


# --------------------------------------------------------------------------- the plugin's kind


@dataclass(frozen=True)
class DecaySpec(MixerSpec):
    """A running decayed sum per channel: s_t = decay * s_(t-1) + x_t; y_t = s_t."""

    channels: int = 8
    decay: float = 0.5


class DecayImpl(MixerImpl):
    @abstractmethod
    def forward(self, x, state, meta):
        """x: [T, channels]; state: ``acc`` [num_slots, channels]. Returns [T, channels]."""




class DecayOracle(DecayImpl):
    """Token by token."""

    def __init__(self, spec):
        self.spec = spec

    def forward(self, x, state, meta):
        out = torch.empty_like(x, dtype=torch.float64)
        qsl, ctx = meta.query_start_loc_cpu.tolist(), meta.context_lens_cpu.tolist()
        slots = meta.state_slots_cpu.tolist()
        for i, slot in enumerate(slots):
            s = state["acc"][slot].double() if ctx[i] else torch.zeros(self.spec.channels, dtype=torch.float64)
            for t in range(qsl[i], qsl[i + 1]):
                s = self.spec.decay * s + x[t].double()
                out[t] = s
            state["acc"][slot] = s.to(state["acc"].dtype)
        return out.to(x.dtype)


class DecayMatrix(DecayImpl):
    """A backend: each sequence at once, y = L @ x + decay^(t+1) s0 with L[t, j] = decay^(t-j)."""

    def __init__(self, spec, use_initial_state=True):
        self.spec, self.use_initial_state = spec, use_initial_state

    def forward(self, x, state, meta):
        out = torch.empty_like(x)
        pool = state["acc"]
        qsl, ctx = meta.query_start_loc_cpu.tolist(), meta.context_lens_cpu.tolist()
        slots = meta.state_slots_cpu.tolist()
        for i, slot in enumerate(slots):
            rows = x[qsl[i]:qsl[i + 1]]
            n = rows.shape[0]
            t = torch.arange(n, dtype=x.dtype)
            powers = (t[:, None] - t[None, :]).clamp(min=0)
            L = torch.where(t[:, None] >= t[None, :], self.spec.decay ** powers, torch.zeros(()))
            y = L @ rows
            if ctx[i] and self.use_initial_state:
                y += (self.spec.decay ** (t + 1))[:, None] * pool[slot]
            out[qsl[i]:qsl[i + 1]] = y
            pool[slot] = y[-1]
        return out


class DecayTorch(Backend):
    name = "decay_torch"
    kind = "decay_sum"
    devices = ("*",)
    dtypes = ("float32",)
    api_version = 1

    @classmethod
    def make_impl(cls, spec, env):
        return DecayMatrix(spec)


class DecayForgetful(DecayTorch):
    name = "decay_forgetful"

    @classmethod
    def make_impl(cls, spec, env):
        return DecayMatrix(spec, use_initial_state=False)  # BUG: continued prefills start from zero


ADAPTER = KindAdapter(
    kind="decay_sum",
    base=dict(channels=8, decay=0.5),
    inputs=lambda spec: {"x": ((spec.channels,), 1.0)},
    oracle=DecayOracle,
    shapes=(("slow_decay", dict(decay=0.9)), ("wide", dict(channels=24))),
)


def decay_state(spec):
    return StateSpec.slots(acc=((spec.channels,), spec.dtype))


# The kind declares its adapter (an installed plugin names it "module:NAME": see test_kit_plugin_kind_check.py).
DECAY = Kind("decay_sum", DecaySpec, DecayImpl, decay_state, "running decayed sum", conformance=ADAPTER)
REGISTRY = Registry.from_backends([DecayTorch, DecayForgetful], kinds=[DECAY])
DecaySumConformance = conformance_suite(ADAPTER)


# --------------------------------------------------------------------------- the tests


def test_a_correct_backend_of_a_plugin_kind_passes_every_case():
    report = run_suite("decay_torch", "cpu", registry=REGISTRY, adapter=ADAPTER, thorough=False)
    assert [r.case for r in report.results][-4:-2] == ["shape-slow_decay[float32]", "shape-wide[float32]"]
    assert len(report.results) == 16 and report.ok, [(r.case, r.reason) for r in report.results]
    assert report.counts()["skip"] == 2  # capture_decode and capture_mixed: it declares no capture


def test_a_buggy_one_fails():
    report = run_suite(DecayForgetful, "cpu", registry=REGISTRY, adapter=ADAPTER)
    failed = {r.case for r in report.results if r.status == "fail"}
    assert {"chunked_prefill[float32]", "decode_after_prefill[float32]"} <= failed


def test_the_factory_makes_a_base_class_a_vendor_subclasses(monkeypatch):
    monkeypatch.delenv("MIXBOARD_THOROUGH", raising=False)  # the quick cases are counted
    assert DecaySumConformance.__name__ == "DecaySumConformance"

    class TestDecay(DecaySumConformance):  # what a vendor's test file holds
        backend = "decay_torch"
        registry = REGISTRY
        device = "cpu"

    cases = TestDecay.conformance_cases()
    assert len(cases) == 16
    results = [TestDecay.run(case) for case, _ in cases]
    assert {r.status for r in results if not r.case.startswith("capture_")} == {"pass"}
    assert {r.status for r in results if r.case.startswith("capture_")} == {"skip"}  # it declares no capture


def test_the_adapter_the_kind_declares_serves_its_backends_by_name():
    report = run_suite("decay_torch", "cpu", registry=REGISTRY, select=["chunked_prefill"])
    assert [(r.case, r.status) for r in report.results] == [("chunked_prefill[float32]", "pass")]


def registry_with(conformance) -> Registry:
    kind = Kind("decay_sum", DecaySpec, DecayImpl, decay_state, "running decayed sum", conformance=conformance)
    return Registry.from_backends([DecayTorch], kinds=[kind])


def test_a_plugin_kind_without_an_adapter_says_how_to_get_one():
    with pytest.raises(UsageError, match="kind 'decay_sum', which has no conformance adapter: .*KindAdapter.*"
                                         "conformance='module:NAME'"):
        run_suite("decay_torch", "cpu", registry=registry_with(None))


@pytest.mark.parametrize("conformance, message", [
    ("no_colon", "declares conformance='no_colon'; expected a KindAdapter or 'module:NAME'"),
    ("no_such_module_here:ADAPTER", "its conformance adapter 'no_such_module_here:ADAPTER' does not load: "
                                    "ModuleNotFoundError"),
    ("mixboard.testing.conformance.kinds:NOPE", "does not load: AttributeError"),
    ("mixboard.testing.conformance.kinds:ATTENTION", "describes kind 'attention'"),
    (42, "its conformance 42 is a int, not a mixboard.testing.conformance.KindAdapter"),
])
def test_a_bad_declaration_is_one_clear_error(conformance, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        run_suite("decay_torch", "cpu", registry=registry_with(conformance))


def test_its_adapter_needs_nothing_new_for_the_thorough_mode():
    # without real sizes or long shapes, the long cases run at its base
    report = run_suite("decay_torch", "cpu", registry=REGISTRY, adapter=ADAPTER, thorough=True)
    long = [r.case for r in report.results][16:]
    assert long == ["prefill_4096[float32]", "long_chunked_prefill[float32]", "long_decode[float32]",
                    "many_sequences_96[float32]"]
    assert report.ok and report.thorough, [(r.case, r.reason) for r in report.results]
