"""The kit's own rules: how cases lay out sequences, what the runner holds a
backend to besides numbers (its inputs untouched, the dtype it returns, no
exception), and where tolerances come from."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from mixboard import ShortConvSpec
from mixboard.testing.conformance import ADAPTERS, DEFAULT_TOLERANCES, kind_cases, run_suite, tolerance_for
from mixboard.testing.conformance.cases import STRIDED
from mixboard.testing.conformance.inputs import place
from mixboard_shortconv.torch_backend import ShortConvTorch
from mixboard_shortconv.torch_impl import ShortConvTorchImpl

SPECS = {"attention": "AttentionSpec", "mamba1": "Mamba1Spec", "mamba2": "Mamba2Spec", "short_conv": "ShortConvSpec"}


@pytest.mark.parametrize("kind", sorted(SPECS))
def test_cases_scatter_sequences_and_keep_slot_0_and_block_0_free(kind):
    import mixboard

    cases = kind_cases(ADAPTERS[kind], getattr(mixboard, SPECS[kind]), "float32", block_size=4)
    assert len({c.id for c in cases}) == len(cases)
    for case in cases:
        running = {}
        for seq in case.seqs:
            assert 0 < seq.slot < case.num_slots and all(0 < b < case.num_blocks for b in seq.blocks)
        for step in case.steps:
            names = [name for name, _ in step]
            assert len(names) == len(set(names))
            for name in names:
                running[name] = case.seq(name)
            # sequences alive together never share a slot or a block
            live = [case.seq(n) for n in names]
            assert len({s.slot for s in live}) == len(live)
            blocks = [b for s in live for b in s.blocks]
            assert len(blocks) == len(set(blocks))
    isolation = next(c for c in cases if c.name == "isolation")
    assert isolation.seq("e").slot == isolation.seq("a").slot  # e starts where a's state was left
    assert isolation.seq("e").blocks[0] == isolation.seq("a").blocks[0]


UNGATED = ["no_gated_norm-ragged_prefill", "no_gated_norm-chunked_prefill", "no_gated_norm-decode_after_prefill",
           "no_gated_norm-mixed_batch"]


def test_mamba2_runs_representative_cases_again_without_the_gated_norm():
    import mixboard

    cases = {c.name: c for c in kind_cases(ADAPTERS["mamba2"], mixboard.Mamba2Spec, "float32", block_size=4)}
    assert sorted(n for n, c in cases.items() if not c.spec.gated_norm) == sorted(UNGATED)
    assert cases["no_gated_norm-chunked_prefill"].steps == cases["chunked_prefill"].steps
    assert cases["no_gated_norm-mixed_batch"].spec == dataclasses.replace(cases["mixed_batch"].spec, gated_norm=False)
    weights = ADAPTERS["mamba2"].weights(cases["no_gated_norm-mixed_batch"].spec, torch.Generator().manual_seed(0))
    assert weights.norm_weight is None  # the layer holds none: the caller's norm has it
    for kind in ("attention", "mamba1", "short_conv"):  # the other kinds declare no variant
        names = {c.name for c in kind_cases(ADAPTERS[kind], getattr(mixboard, SPECS[kind]), "float32", block_size=4)}
        assert not any(n.startswith("no_gated_norm-") for n in names)


def test_a_backend_that_refuses_a_variant_skips_its_cases_with_its_reason():
    from mixboard_mamba2.torch_backend import Mamba2Torch

    class GatedOnly(Mamba2Torch):
        name = "mamba2_gated_only"

        @classmethod
        def check(cls, spec, env):
            return [] if spec.gated_norm else ["applies the gated norm itself; gated_norm=False is not served"]

    report = run_suite(GatedOnly, "cpu", ("float32",), select=[*UNGATED, "ragged_prefill"])
    status = {r.case: (r.status, r.reason) for r in report.results}
    assert status.pop("ragged_prefill[float32]") == ("pass", None)
    assert set(status.values()) == {("skip", "applies the gated norm itself; gated_norm=False is not served")}
    assert len(status) == 4 and report.ok


def test_strided_inputs_are_views_into_wider_rows_or_have_their_heads_outermost():
    x = torch.randn(5, 12)
    placed = place({"x": x}, "cpu", STRIDED)["x"]
    assert not placed.is_contiguous() and placed.storage_offset() == 3 and placed.stride() == (17, 1)
    assert torch.equal(placed, x)
    heads = torch.randn(5, 4, 3)  # [T, H, D]: a transpose of a dense [H, T, D], after three poisoned elements
    placed = place({"q": heads}, "cpu", STRIDED)["q"]
    assert placed.storage_offset() == 3 and placed.stride() == (3, 15, 1)
    assert torch.empty_like(placed).stride() == (3, 15, 1)  # what a backend's output would inherit
    assert torch.equal(placed, heads) and placed._base[:3].isnan().all()


class InPlace(ShortConvTorchImpl):
    def forward(self, B, C, x, weights, state, meta):
        out = super().forward(B, C, x, weights, state, meta)
        x.mul_(1.0 + 1e-3)  # scribbles on its input
        return out


class WrongDtype(ShortConvTorchImpl):
    def forward(self, *args):
        return super().forward(*args).double()


class Raises(ShortConvTorchImpl):
    def forward(self, *args):
        raise RuntimeError("kernel launch failed")


def backend_with(impl_cls, tolerances=None):
    attrs = {"name": f"short_conv_{impl_cls.__name__.lower()}",
             "make_impl": classmethod(lambda cls, spec, env: impl_cls(spec))}
    if tolerances is not None:
        attrs["tolerances"] = tolerances
    return type(impl_cls.__name__, (ShortConvTorch,), attrs)


def first_result(impl_cls, **kw):
    (result,) = run_suite(backend_with(impl_cls), "cpu", ("float32",), select=["ragged_prefill"], **kw).results
    return result


def test_a_backend_that_changes_its_inputs_fails():
    result = first_result(InPlace)
    assert result.status == "fail" and result.reason == "step 1 of 1: the backend changed its input 'x' in place"


def test_a_backend_that_returns_another_dtype_fails():
    result = first_result(WrongDtype)
    assert result.status == "fail"
    assert result.reason == "step 1 of 1: output is torch.float64, expected torch.float32 (the layer's dtype)"


def test_a_backend_that_raises_fails_with_what_it_raised():
    result = first_result(Raises)
    assert result.status == "fail" and result.reason == "raised RuntimeError: kernel launch failed"
    assert isinstance(result.error, RuntimeError)


def test_tolerances_come_from_the_suite_then_the_backend_then_the_kit():
    backend = backend_with(ShortConvTorchImpl, tolerances={"bfloat16": 0.1})
    assert tolerance_for(backend, "bfloat16") == 0.1
    assert tolerance_for(backend, "float32") == DEFAULT_TOLERANCES["float32"] == 1e-5
    assert tolerance_for(backend, "bfloat16", {"bfloat16": 0.2}) == 0.2
    with pytest.raises(ValueError, match="tolerance for float16 must be a positive number, not -1"):
        tolerance_for(backend_with(ShortConvTorchImpl, tolerances={"float16": -1}), "float16")
    report = run_suite(backend, "cpu", ("bfloat16",), select=["ragged_prefill"])
    assert report.results[0].tolerance == 0.1


def test_a_suite_override_can_tighten_the_bound_until_the_backend_fails():
    report = run_suite(ShortConvTorch, "cpu", ("bfloat16",), select=["mixed_batch"], tolerances={"bfloat16": 1e-9})
    (result,) = report.results
    assert result.status == "fail" and "> tolerance 1e-09" in result.reason
    assert ShortConvSpec(dtype="bfloat16").dtype == "bfloat16"


def test_blocks_follow_the_multiple_a_backends_paged_state_asks_for():
    from mixboard.kinds.attention import attention_state
    from mixboard.state import StateSpec
    from mixboard_sdpa.backend import SdpaAttention

    seen = []

    class Recording:
        def __init__(self, inner):
            self.inner = inner

        def forward(self, q, k, v, state, meta):
            seen.append((meta.block_size, state["k_cache"].shape[1]))
            return self.inner.forward(q, k, v, state, meta)

    class Sdpa8(SdpaAttention):
        name = "sdpa_blocks_of_8"

        @classmethod
        def state_spec(cls, spec):
            canonical = attention_state(spec)
            return StateSpec.paged(block_multiple=8, **{n: (t.shape, t.dtype) for n, t in canonical.tensors})

        @classmethod
        def make_impl(cls, spec, env):
            return Recording(super().make_impl(spec, env))

    report = run_suite(Sdpa8, "cpu", ("float32",), select=["long_prefill"])  # 41 tokens: blocks of 8 are crossed
    assert report.ok, report.results
    assert set(seen) == {(8, 8)}
