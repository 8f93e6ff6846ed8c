"""The kit catches real mistakes: known bugs planted in copies of the
first-party portable backends (subclasses of their Backend and impl classes,
or wrappers around their impls) must fail it, and the unmodified backends
must pass it.

The buggy copies are registered the two ways a kit user can: as a Backend
class given to ``run_suite`` directly, and by name in a Registry built with
``Registry.from_backends``.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from mixboard import Registry
from mixboard.ops.causal_conv import causal_conv1d_step
from mixboard.testing.conformance import run_suite, tolerance_for
from mixboard_mamba1.torch_backend import Mamba1Torch
from mixboard_mamba2.gated_norm import gated_rmsnorm
from mixboard_mamba2.torch_backend import Mamba2Torch
from mixboard_mamba2.torch_impl import Mamba2TorchImpl
from mixboard_sdpa.backend import SdpaAttention
from mixboard_sdpa.impl import SdpaAttentionImpl
from mixboard_shortconv.torch_backend import ShortConvTorch
from mixboard_shortconv.torch_impl import ShortConvTorchImpl


def failures(backend, **kw):
    """The failed cases of the kit in float32 (stopping at the first: the claim is that it fails)."""
    report = run_suite(backend, "cpu", ("float32",), fail_fast=True, **kw)
    return {r.case: r.reason for r in report.results if r.status == "fail"}


# --------------------------------------------------------------------------- causal mask off by one


class OffByOneMaskImpl(SdpaAttentionImpl):
    def _prefill_mask(self, run, device):
        q_pos = torch.arange(run.context_len, run.seq_len, device=device)[:, None]
        k_pos = torch.arange(run.seq_len, device=device)[None, :]
        return k_pos <= q_pos + 1  # BUG: each query also sees the next token


class SdpaOffByOneMask(SdpaAttention):
    name = "sdpa_bug_causal_mask"

    @classmethod
    def make_impl(cls, spec, env):
        return OffByOneMaskImpl(spec)


# --------------------------------------------------------------------------- wrong GQA head mapping


class InterleavedGqaImpl:
    """Query head h reads kv head h % num_kv_heads instead of h // group (the
    layout of a kernel that interleaves heads). Done by renumbering the query
    heads around the real impl: sdpa reads kv head j // group for its head j,
    so query head h goes to j = (h % kv) * group + h // kv."""

    def __init__(self, inner, spec):
        self.inner, self.spec = inner, spec
        kv, group = spec.num_kv_heads, spec.num_heads // spec.num_kv_heads
        self.to_inner = torch.tensor([(h % kv) * group + h // kv for h in range(spec.num_heads)])

    def forward(self, q, k, v, state, meta):
        renumbered = torch.empty_like(q)
        renumbered[:, self.to_inner] = q
        return self.inner.forward(renumbered, k, v, state, meta)[:, self.to_inner]


class SdpaWrongGqa(SdpaAttention):
    name = "sdpa_bug_gqa_mapping"

    @classmethod
    def make_impl(cls, spec, env):
        return InterleavedGqaImpl(SdpaAttentionImpl(spec), spec)


# --------------------------------------------------------------------------- initial state ignored


class Mamba1IgnoresInitialState(Mamba1Torch):
    name = "mamba1_bug_initial_state"

    @classmethod
    def builder(cls, spec, env):
        build = super().builder(spec, env)

        def buggy(common):
            meta = build(common)
            # BUG: a continued prefill scans from zeros instead of its saved SSM state
            return dataclasses.replace(meta, prefills=tuple(dataclasses.replace(p, fresh=True) for p in meta.prefills))

        return buggy


# --------------------------------------------------------------------------- state written to the wrong slot


class WrongSlotWrites:
    """After the real step, each sequence's new state lands one slot over
    (the right slot keeps its old record): an off-by-one slot index."""

    def __init__(self, inner):
        self.inner = inner

    def forward(self, *args):
        *inputs, state, (meta, common) = args
        slots = common.state_slots.long()
        before = {name: pool.clone() for name, pool in state.items()}
        out = self.inner.forward(*inputs, state, meta)
        for name, pool in state.items():
            written = pool[slots].clone()
            pool[slots] = before[name][slots]
            pool[(slots + 1) % pool.shape[0]] = written
        return out


class Mamba2WrongSlot(Mamba2Torch):
    name = "mamba2_bug_wrong_slot"

    @classmethod
    def builder(cls, spec, env):
        build = super().builder(spec, env)
        return lambda common: (build(common), common)

    @classmethod
    def make_impl(cls, spec, env):
        return WrongSlotWrites(super().make_impl(spec, env))


# --------------------------------------------------------------------------- conv state not advanced on decode


class FrozenDecodeStateImpl(ShortConvTorchImpl):
    def forward(self, B, C, x, weights, state, meta):
        if not meta.all_decodes:
            return super().forward(B, C, x, weights, state, meta)
        # BUG: the decode reads the saved inputs but writes its update to a scratch copy
        conv = causal_conv1d_step(B * x, weights.conv_weight, weights.conv_bias, state["conv"].clone(),
                                  meta.decode_slots)
        return conv.mul_(C)


class ShortConvFrozenDecodeState(ShortConvTorch):
    name = "short_conv_bug_decode_state"

    @classmethod
    def make_impl(cls, spec, env):
        return FrozenDecodeStateImpl(spec)


# --------------------------------------------------------------------------- an error only in the last token


class LastTokenOff:
    def __init__(self, inner, error):
        self.inner, self.error = inner, error

    def forward(self, *args):
        out = self.inner.forward(*args)
        out[-1] += self.error
        return out


def last_token_off(times_tolerance: float) -> type:
    class Mamba2LastTokenOff(Mamba2Torch):
        name = "mamba2_bug_last_token"

        @classmethod
        def make_impl(cls, spec, env):
            error = times_tolerance * tolerance_for(Mamba2Torch, spec.dtype)
            return LastTokenOff(super().make_impl(spec, env), error)

    return Mamba2LastTokenOff


# --------------------------------------------------------------------------- the gated norm applied anyway


class NormsAnywayImpl(Mamba2TorchImpl):
    """Ignores gated_norm=False: gates and normalizes y all the same, with a unit weight where the layer
    hands none (the caller then applies the norm a second time)."""

    def _output(self, y, x, z, weights, dtype):
        spec = self.spec
        T, DI = y.shape[0], spec.d_inner
        y.addcmul_(weights.D.float().view(1, spec.num_heads, 1), x)
        weight = weights.norm_weight if weights.norm_weight is not None else torch.ones(DI)  # BUG
        return gated_rmsnorm(y.view(T, DI), z, weight, DI // spec.n_groups, spec.norm_eps, dtype)


class Mamba2NormsAnyway(Mamba2Torch):
    name = "mamba2_bug_norms_anyway"

    @classmethod
    def make_impl(cls, spec, env):
        return NormsAnywayImpl(spec)


# --------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("backend", [SdpaAttention, Mamba1Torch, Mamba2Torch, ShortConvTorch],
                         ids=lambda b: b.name)
def test_the_unmodified_backends_pass(backend):
    report = run_suite(backend, "cpu", ("float32",))
    # every case passes but the capture cases, which their declaration (capture = "never") skips
    assert report.ok and {r.case for r in report.results if r.status != "pass"} == {
        "capture_decode[float32]", "capture_mixed[float32]"}, \
        [(r.case, r.reason) for r in report.results if r.status != "pass"]


def test_causal_mask_off_by_one_is_caught():
    failed = failures(SdpaOffByOneMask)
    # a fresh prompt takes SDPA's own causal path; the bug shows once a prefill continues from the cache
    assert failed, "the kit passed a causal mask that shows each query the next token"
    assert any("|backend - oracle|" in reason for reason in failed.values()), failed


def test_wrong_gqa_head_mapping_is_caught():
    failed = failures(SdpaWrongGqa)
    assert failed, "the kit passed query heads reading the wrong kv heads"


def test_initial_state_ignored_is_caught():
    failed = failures(Mamba1IgnoresInitialState)
    assert failed, "the kit passed a continued prefill that ignores its saved SSM state"


def test_state_written_to_the_wrong_slot_is_caught_through_a_registry():
    registry = Registry.from_backends([Mamba2WrongSlot])
    failed = failures("mamba2_bug_wrong_slot", registry=registry)
    assert failed, "the kit passed state written to the neighbouring slot"
    # Both symptoms are named: the slot that belongs to nobody changed, or the continuation read stale state.
    reason = next(iter(failed.values()))
    assert "belongs to no sequence of the step" in reason or "|backend - oracle|" in reason, reason


def test_conv_state_not_advanced_on_decode_is_caught():
    failed = failures(ShortConvFrozenDecodeState)
    assert failed, "the kit passed decodes that never advance the conv state"
    assert any("step 3 of" in reason or "step 4 of" in reason for reason in failed.values()), failed


def test_an_error_of_ten_tolerances_in_the_last_token_only_is_caught():
    failed = failures(last_token_off(10.0))
    assert failed, "the kit passed an output off by 10x its tolerance in the last token"
    (reason,) = failed.values()
    assert "> tolerance 1e-05" in reason


def test_an_error_of_half_the_tolerance_passes():
    report = run_suite(last_token_off(0.5), "cpu", ("float32",), select=["ragged_prefill", "mixed_batch"])
    assert report.ok and len(report.results) == 2
    assert all(4e-6 < r.max_abs_error <= 1e-5 for r in report.results)  # the planted error, measured


def test_the_gated_norm_applied_under_gated_norm_false_is_caught():
    ungated = [f"no_gated_norm-{name}" for name in ("ragged_prefill", "chunked_prefill", "decode_after_prefill",
                                                   "mixed_batch")]
    failed = failures(Mamba2NormsAnyway, select=ungated)
    assert failed, "the kit passed a backend that gates and normalizes y under gated_norm=False"
    assert all("|backend - oracle|" in reason for reason in failed.values()), failed
    report = run_suite(Mamba2NormsAnyway, "cpu", ("float32",), select=["ragged_prefill", "mixed_batch"])
    assert report.ok  # where the norm is the backend's, the same backend is right
