"""The thorough mode's long cases catch what the quick mode cannot: bugs
planted in copies of first-party backends that show only past 1024 keys,
2048 tokens or 64 sequences pass every quick case and fail the long case
named.

Each test selects just the long cases it needs, run at a narrower width
than the adapter's real one (one that only the oracle's cost depends on:
the lengths and batch sizes, which the bugs hinge on, are the cases' own),
so that this file takes seconds.
"""

from __future__ import annotations

import dataclasses
import re

from mixboard.testing.conformance import ADAPTERS, run_suite
from mixboard_mamba2.ssd import ssd_prefill_batch
from mixboard_mamba2.torch_backend import Mamba2Torch
from mixboard_mamba2.torch_impl import Mamba2TorchImpl
from mixboard_sdpa.backend import SdpaAttention
from mixboard_sdpa.impl import SdpaAttentionImpl

NARROW = {
    "attention": dataclasses.replace(ADAPTERS["attention"], real=dict(num_heads=2, num_kv_heads=1, head_size=16)),
    "mamba2": dataclasses.replace(ADAPTERS["mamba2"], real=dict(num_heads=2, head_dim=8, d_state=16, n_groups=1,
                                                                d_conv=4, chunk_size=256)),
}


def failures(backend, cases=None, thorough=False) -> dict[str, str]:
    """{case name: reason} of the failing cases in float32: the ones named, or every case of the mode."""
    report = run_suite(backend, "cpu", ("float32",), select=cases, thorough=thorough, adapter=NARROW[backend.kind])
    assert report.results and (cases is None or {r.case.split("[")[0] for r in report.results} == set(cases))
    return {r.case.split("[")[0]: r.reason for r in report.results if r.status == "fail"}


def with_impl(base: type, name: str, impl: type) -> type:
    return type(name, (base,), {"name": name, "make_impl": classmethod(lambda cls, spec, env: impl(spec))})


class KeysUpTo:
    """An sdpa impl whose ``phase`` ("_prefills" or "_decodes") sees only its last ``keys`` keys, as a
    kernel whose key loop (or split-KV grid) covers that many would."""

    def __init_subclass__(cls, phase: str, keys: int, **kw):
        super().__init_subclass__(**kw)

        def limited(self, *args):
            window, self.window = self.window, self.window or keys
            try:
                getattr(SdpaAttentionImpl, phase)(self, *args)
            finally:
                self.window = window

        setattr(cls, phase, limited)


class Prefill2048Keys(KeysUpTo, SdpaAttentionImpl, phase="_prefills", keys=2048):
    pass


class Decode1024Keys(KeysUpTo, SdpaAttentionImpl, phase="_decodes", keys=1024):
    pass


class First64DecodesImpl(SdpaAttentionImpl):
    def _decodes(self, q, k_cache, v_cache, out, meta):
        super()._decodes(q, k_cache, v_cache, out, meta)
        out[64:meta.common.num_decodes] = 0  # BUG: a launch grid of 64 sequences; later rows never written


class StateOf8ChunksImpl(Mamba2TorchImpl):
    """Each prefill is scanned 8 chunks at a time and every run of 8 after the
    first starts from zeros: a kernel whose chunk-state pass holds 8 chunks."""

    def _prefills(self, step, x, dts, A, B, C, ssm_pool, y):
        chunk = self.spec.chunk_size
        for p in step.prefills:
            initial = None if p.fresh else ssm_pool[p.slot].float().unsqueeze(0)
            for start in range(p.start, p.end, 8 * chunk):
                rows = slice(start, min(p.end, start + 8 * chunk))
                y[rows], final = ssd_prefill_batch(x[rows], dts[rows], A, B[rows], C[rows], 1, chunk,
                                                   initial if start == p.start else None)  # BUG: not final
            ssm_pool[p.slot] = final[0].to(ssm_pool.dtype)


def test_a_prefill_that_drops_keys_past_2048_fails_the_long_prefills():
    bug = with_impl(SdpaAttention, "sdpa_bug_2048_keys", Prefill2048Keys)
    assert failures(bug) == {}  # every quick case
    assert set(failures(bug, ["prefill_4096", "long_chunked_prefill"])) == {"prefill_4096", "long_chunked_prefill"}


def test_a_decode_that_drops_keys_past_1024_fails_long_decode():
    bug = with_impl(SdpaAttention, "sdpa_bug_1024_decode_keys", Decode1024Keys)
    assert failures(bug) == {}
    reason = failures(bug, ["long_decode"])["long_decode"]
    assert "sequence 'a' at position 1024" in reason, reason  # its first key past 1024


def test_a_step_that_serves_64_decodes_only_fails_many_sequences_96():
    bug = with_impl(SdpaAttention, "sdpa_bug_first_64_decodes", First64DecodesImpl)
    assert failures(bug) == {}  # many_sequences has 33 decodes a step
    assert "many_sequences_96" in failures(bug, ["many_sequences_96"])


def test_a_mamba2_scan_that_keeps_8_chunks_of_state_fails_prefill_4096():
    bug = with_impl(Mamba2Torch, "mamba2_bug_8_chunks", StateOf8ChunksImpl)
    # at the real chunk size of 256 the bug shows past 2048 tokens (prefill_300 has 300)
    assert failures(bug, ["prefill_300"]) == {}
    reason = failures(bug, ["prefill_4096"])["prefill_4096"]
    position = int(re.search(r"sequence 'a' at position (\d+):", reason).group(1))
    assert position >= 2048, reason  # the worst token is in the ninth chunk or later
