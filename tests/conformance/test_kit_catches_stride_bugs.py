"""The case ``strided_pools`` catches backends that assume contiguous pools.

An engine's hybrid cache (vLLM's) lays each record of a pool in a larger
page: ``stride(0)`` exceeds the record, and the bytes between records are
another layer's. Two bugs are planted, each passing the case whose slots and
blocks are handed out the same way over contiguous pools
(``consecutive_slots``), so that nothing but the new case catches them:

* a portable backend that writes K/V through a flat view of the pool (what
  ``write_kv`` did before pools could be strided);
* each CPU backend's C kernel given the record's size as its stride (what
  the kernels assumed before they took one).

Each must fail ``strided_pools`` naming the padding it wrote. And the case
``noncontiguous`` catches an output laid out after a dense q's strides (heads
outermost), which a kernel writing rows of H * D gets wrong.
"""

from __future__ import annotations

import importlib

import pytest
import torch

from mixboard.testing.conformance import run_suite
from mixboard_sdpa.backend import SdpaAttention
from mixboard_sdpa.impl import SdpaAttentionImpl


def outcomes(backend, cases=("consecutive_slots", "strided_pools")) -> dict[str, tuple[str, str | None]]:
    report = run_suite(backend, "cpu", ("float32",), select=list(cases))
    return {r.case.split("[")[0]: (r.status, r.reason) for r in report.results}


def assert_caught(found: dict) -> None:
    assert found["consecutive_slots"] == ("pass", None), found
    status, reason = found["strided_pools"]
    assert status == "fail", found
    assert "the padding of" in reason and "stride(0)" in reason and "flat view" in reason, reason


class FlatViewWriteImpl(SdpaAttentionImpl):
    def _write(self, k_cache, v_cache, meta, k, v):
        for pool, new in ((k_cache, k), (v_cache, v)):
            # BUG: the pool seen as one run of tokens, as if its blocks lay back to back
            row = new.shape[1] * new.shape[2]
            flat = torch.as_strided(pool, (pool.shape[0] * pool.shape[1], *new.shape[1:]), (row, new.shape[2], 1))
            flat.index_copy_(0, meta.slot_mapping, new)


def test_writes_through_a_flat_view_of_the_pool_fail_strided_pools():
    bug = type("SdpaFlatView", (SdpaAttention,), {
        "name": "sdpa_bug_flat_view", "make_impl": classmethod(lambda cls, spec, env: FlatViewWriteImpl(spec))})
    assert_caught(outcomes(bug))


@pytest.mark.parametrize("backend, module", [
    ("sdpa_cpu", "mixboard_sdpa.cpu_impl"),
    ("mamba1_cpu", "mixboard_mamba1.cpu_impl"),
    ("mamba2_cpu", "mixboard_mamba2.cpu_impl"),
    ("short_conv_cpu", "mixboard_shortconv.cpu_impl"),
])
def test_a_kernel_given_the_record_size_as_its_stride_fails_strided_pools(monkeypatch, backend, module):
    assert outcomes(backend) == {"consecutive_slots": ("pass", None), "strided_pools": ("pass", None)}
    # BUG: record i at i * its size, as a kernel that assumes contiguous pools addresses it
    monkeypatch.setattr(importlib.import_module(module), "record_stride", lambda pool, record=None: pool[0].numel())
    assert_caught(outcomes(backend))


def test_the_pools_of_strided_pools_are_views_into_pages_with_padding_between_records():
    """What the case hands a backend: the layout it claims, so that the tests above mean something."""
    from mixboard.kinds.attention import AttentionSpec, attention_state
    from mixboard.kinds.mamba1 import Mamba1Spec, mamba1_state
    from mixboard.testing.conformance.pages import PAD, allocate_in_pages

    for spec_state in (attention_state(AttentionSpec(num_heads=4, num_kv_heads=2, head_size=16)),
                       mamba1_state(Mamba1Spec(d_inner=16, d_state=4, d_conv=4, dt_rank=4, state_dtype="float32",
                                               dtype="bfloat16"))):
        state, pages = allocate_in_pages(spec_state, 6, 4, "cpu")
        for name, pool in state.items():
            record = pool[0].numel()
            assert not pool.is_contiguous() and pool[0].is_contiguous() and pool.storage_offset() > 0, name
            assert pool.stride(0) > record and pool.stride(0) % record, (name, pool.stride(), record)
            assert pool.untyped_storage().data_ptr() == pages.buffer.untyped_storage().data_ptr()
            assert pool.data_ptr() % 64 == 0 and pool.stride(0) * pool.element_size() % 64 == 0
        assert pages.changed() is None
        pads = pages.buffer.index_select(1, pages.padding)
        assert torch.equal(pads.view(torch.float32), torch.full_like(pads.view(torch.float32), PAD))
        next(iter(state.values()))[3].fill_(1.0)  # a write inside a record is no change of padding
        assert pages.changed() is None
        pages.buffer[4, int(pages.padding[-1])] ^= 1
        assert pages.changed().startswith(f"the padding of {pages.unit} 4's page changed (1 byte(s)")


def test_an_output_laid_out_like_q_fails_noncontiguous():
    """sdpa_cpu before 0d8cc11: its output was empty_like(q), which keeps the strides of a dense q whose heads
    are outermost, while its kernel writes rows of H * D. Only ``noncontiguous`` hands it such a q."""
    from mixboard_sdpa.cpu_backend import SdpaCpuAttention
    from mixboard_sdpa.cpu_impl import SdpaCpuAttentionImpl
    from mixboard_sdpa.inputs import check_inputs

    class OutLikeQImpl(SdpaCpuAttentionImpl):
        def forward(self, q, k, v, state, meta):
            k_cache, v_cache = check_inputs(self.layer_name, self.spec, q, k, v, state, meta)
            self._write(k_cache, v_cache, meta, k, v)
            out = torch.empty_like(q)  # BUG: q's strides, where the kernel writes rows
            self._decodes(q, k_cache, v_cache, out, meta)
            if meta.prefills:
                self._prefills(q, k, v, k_cache, v_cache, out, meta)
            return out

    bug = type("SdpaCpuOutLikeQ", (SdpaCpuAttention,), {
        "name": "sdpa_cpu_bug_out_like_q", "make_impl": classmethod(lambda cls, spec, env: OutLikeQImpl(spec))})
    found = outcomes(bug, ("mixed_batch", "noncontiguous"))
    assert found["mixed_batch"] == ("pass", None), found
    status, reason = found["noncontiguous"]
    assert status == "fail" and "|backend - oracle|" in reason, found
