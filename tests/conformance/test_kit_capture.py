"""The kit checks a backend's capture declaration (mixboard.capture): known
mistakes planted in copies of a backend that may be captured (a host sync,
a Python value of the recorded step read at replay, an output sized by the
data, a memo kept from the recorded step, a plan whose shapes change) must
each fail the capture cases naming what they did, and the clean backend
must pass them. Cases a declaration does not cover are skipped, saying so."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from mixboard import AttentionImpl, Backend, CommonBatchMetadata
from mixboard.testing.conformance import AttentionConformance, run_suite
from mixboard.testing.conformance.host_syncs import watch

CASES = ["capture_decode", "capture_mixed"]


# --------------------------------------------------------------------------- a backend that may be captured


@dataclasses.dataclass
class Step:
    """Everything forward reads, in tensors whose shapes follow (num_tokens, num_seqs) and the table's width."""

    common: CommonBatchMetadata
    token_seq: torch.Tensor  # int64 [T]: each row's sequence
    token_pos: torch.Tensor  # int64 [T]: each row's position in it
    slot_mapping: torch.Tensor  # int64 [T]


def build_step(common: CommonBatchMetadata) -> Step:
    """Planned on the host, outside the graph: Python and sizes are free here."""
    starts = common.query_start_loc_cpu.long()
    seq = torch.repeat_interleave(torch.arange(common.num_seqs), starts[1:] - starts[:-1])
    pos = common.context_lens_cpu.long()[seq] + torch.arange(common.num_tokens) - starts[seq]
    device = common.block_table.device
    return Step(common, seq.to(device), pos.to(device), common.slot_mapping.long())


class DenseImpl(AttentionImpl):
    """Every row attends over its sequence's whole row of the block table, masked by its position: the work of
    the longest table for every row, but no per-step value leaves the tensors."""

    def __init__(self, spec):
        self.spec = spec

    def forward(self, q, k, v, state, meta):
        k_cache, v_cache = state["k_cache"], state["v_cache"]
        T, H, D = q.shape
        blocks, bs, kvh, _ = k_cache.shape
        k_cache.view(blocks * bs, kvh, D).index_copy_(0, meta.slot_mapping, k)
        v_cache.view(blocks * bs, kvh, D).index_copy_(0, meta.slot_mapping, v)
        keys, values = (self.gather(pool, meta) for pool in (k_cache, v_cache))  # [T, L, H, D]
        visible = self.visible(keys.shape[1], meta)  # [T, L]
        logits = torch.einsum("thd,tlhd->thl", q.float(), keys) * self.spec.softmax_scale
        probs = logits.masked_fill(~visible[:, None, :], -math.inf).softmax(-1)
        return torch.einsum("thl,tlhd->thd", probs, values).to(q.dtype)

    def table(self, meta):
        return meta.common.block_table.long()

    def gather(self, pool, meta):
        table = self.table(meta)  # [N, W]: padding too, masked below
        n, width = table.shape
        per_seq = pool.index_select(0, table.flatten()).view(n, width * pool.shape[1], *pool.shape[2:])
        group = self.spec.num_heads // self.spec.num_kv_heads
        return per_seq.index_select(0, meta.token_seq).float().repeat_interleave(group, dim=2)

    def visible(self, keys, meta):
        return torch.arange(keys, device=meta.token_pos.device)[None, :] <= meta.token_pos[:, None]


class DenseAttention(Backend):
    name = "dense_capture_attn"
    kind = "attention"
    devices = ("cpu",)
    dtypes = ("float32",)
    api_version = 1
    capture = "any"
    impl = DenseImpl

    @classmethod
    def check(cls, spec, env):
        return [] if spec.causal and spec.sliding_window is None and spec.logits_soft_cap is None else ["causal only"]

    @classmethod
    def builder(cls, spec, env):
        return build_step

    @classmethod
    def make_impl(cls, spec, env):
        return cls.impl(spec)


def planted(name: str, impl: type, capture: str = "any", builder=None) -> type:
    """A copy of DenseAttention with ``impl`` (and ``builder``) in place of its own."""
    attrs = {"name": name, "impl": impl, "capture": capture}
    if builder is not None:
        attrs["builder"] = classmethod(lambda cls, spec, env: builder)
    return type(name, (DenseAttention,), attrs)


def outcome(backend) -> dict[str, tuple[str, str | None]]:
    report = run_suite(backend, "cpu", ("float32",), select=CASES)
    return {r.case.split("[")[0]: (r.status, r.reason) for r in report.results}


def test_the_clean_backend_passes_both_cases():
    assert outcome(DenseAttention) == {"capture_decode": ("pass", None), "capture_mixed": ("pass", None)}


# --------------------------------------------------------------------------- host syncs, data-sized outputs


class ItemImpl(DenseImpl):
    def gather(self, pool, meta):  # only the keys of the longest sequence: its length read on the host
        return super().gather(pool, meta)[:, : int(meta.common.seq_lens.max().item())]

    def visible(self, keys, meta):
        return super().visible(keys, meta)


class TolistImpl(DenseImpl):
    def table(self, meta):  # rebuilt from host lists
        return torch.tensor(meta.common.block_table.tolist())


class NonzeroImpl(DenseImpl):
    def forward(self, q, k, v, state, meta):
        out = super().forward(q, k, v, state, meta)
        fresh = torch.nonzero(meta.common.context_lens == 0).flatten()  # a size only the data knows
        return out.index_copy_(0, fresh.new_empty(0), out[:0]) if fresh.numel() > 99 else out


class MaskWriteImpl(DenseImpl):
    def visible(self, keys, meta):
        visible = torch.ones(meta.token_pos.shape[0], keys, dtype=torch.bool)
        visible[torch.arange(keys)[None, :] > meta.token_pos[:, None]] = False  # t[mask] = v: nonzero on a GPU
        return visible


@pytest.mark.parametrize("impl, call", [
    (ItemImpl, "aten._local_scalar_dense (a host sync: .item(), int(t), float(t) or bool(t) of a tensor)"),
    (TolistImpl, "Tensor.tolist (its values read on the host)"),
    (NonzeroImpl, "aten.nonzero (an output whose size depends on the data)"),
    (MaskWriteImpl, "aten.index_put_ through a boolean mask"),
])
def test_a_forward_that_reads_the_host_is_refuted_naming_the_call(impl, call):
    found = outcome(planted(f"bug_{impl.__name__.lower()}", impl, capture="uniform_decode"))
    status, reason = found["capture_decode"]
    assert status == "fail", reason
    assert reason.startswith("step 2 of 4: declares capture='uniform_decode', but its forward calls " + call), reason
    assert found["capture_mixed"][0] == "skip"


def test_the_builder_may_sync_it_runs_outside_the_graph():
    def syncing_builder(common):
        assert int(common.seq_lens.max()) == common.max_seq_len  # a host read, in the builder: allowed
        return build_step(common)

    assert outcome(planted("builder_syncs", DenseImpl, builder=syncing_builder))["capture_mixed"] == ("pass", None)


# --------------------------------------------------------------------------- the recorded step's Python values


class MaxSeqLenImpl(DenseImpl):
    def gather(self, pool, meta):  # the keys up to the step's longest sequence, a Python int
        return super().gather(pool, meta)[:, : meta.common.max_seq_len]


class NumDecodesImpl(DenseImpl):
    def visible(self, keys, meta):
        visible = super().visible(keys, meta)
        n = meta.common.num_decodes  # a decode sees its whole sequence: rows [:num_decodes], a Python int
        visible[:n] = torch.arange(keys)[None, :] < meta.common.seq_lens.long()[meta.token_seq[:n], None]
        return visible


class BlockRangeImpl(DenseImpl):
    def gather(self, pool, meta):  # only the blocks the step owns, from its block_range (a Python tuple)
        lo, hi = meta.common.block_range
        table = (self.table(meta) - lo).clamp(0, hi - lo)
        n, width = table.shape
        per_seq = pool[lo:hi + 1].index_select(0, table.flatten()).view(n, width * pool.shape[1], *pool.shape[2:])
        group = self.spec.num_heads // self.spec.num_kv_heads
        return per_seq.index_select(0, meta.token_seq).float().repeat_interleave(group, dim=2)


class MemoImpl(DenseImpl):
    def visible(self, keys, meta):  # made once per step and kept in the meta's memo for the other layers
        if not hasattr(meta, "_visible"):
            meta._visible = super().visible(keys, meta)
        return meta._visible


@pytest.mark.parametrize("impl, case, capture", [
    (MaxSeqLenImpl, "capture_decode", "uniform_decode"),
    (BlockRangeImpl, "capture_decode", "uniform_decode"),
    (MemoImpl, "capture_decode", "uniform_decode"),
    (NumDecodesImpl, "capture_mixed", "any"),  # as many decodes in every step of decodes
])
def test_a_forward_that_keeps_the_recorded_step_is_refuted_at_replay(impl, case, capture):
    found = outcome(planted(f"bug_{impl.__name__.lower()}", impl, capture=capture))
    status, reason = found[case]
    assert status == "fail", reason
    assert reason.startswith("step 3 of 4, replayed from step 2's recording: "), reason
    assert f"declares capture='{capture}', but on the recorded step's metadata, refilled, its forward " in reason
    if capture == "any":
        assert found["capture_decode"] == ("pass", None)  # num_decodes is num_seqs in every step of decodes


def test_a_plan_whose_shapes_change_cannot_be_replayed():
    def per_length(common):  # a tensor as long as the longest sequence
        step = build_step(common)
        return dataclasses.replace(step, slot_mapping=step.slot_mapping), torch.arange(common.max_seq_len)

    class TupleImpl(DenseImpl):
        def forward(self, q, k, v, state, meta):
            return super().forward(q, k, v, state, meta[0])

    status, reason = outcome(planted("bug_plan_shapes", TupleImpl, "uniform_decode", per_length))["capture_decode"]
    assert status == "fail" and reason == (
        "step 3 of 4: declares capture='uniform_decode', but its builder's output for this step cannot be copied into "
        "the one recorded at step 2: meta[1]: shape [10] recorded, [14] now; a graph replays the recorded tensors, so "
        "for every step of decodes of as many sequences they must keep their shapes")


# --------------------------------------------------------------------------- what a declaration covers


def test_never_skips_both_cases_and_uniform_decode_the_mixed_one():
    never = outcome(planted("never_attn", DenseImpl, capture="never"))
    assert {status for status, _ in never.values()} == {"skip"}
    assert never["capture_decode"][1] == ("declares capture='never' (the default): its forward runs eagerly every "
                                          "step, never replayed from a graph")
    decode = outcome(planted("decode_attn", DenseImpl, capture="uniform_decode"))
    assert decode == {"capture_decode": ("pass", None), "capture_mixed": (
        "skip", "declares capture='uniform_decode': only steps of decodes are replayed, not mixed ones")}


def test_the_base_classes_run_the_capture_cases_as_any_other():
    class TestDense(AttentionConformance):
        backend = planted("suite_attn", NumDecodesImpl)
        dtypes = ("float32",)

    cases = {case.id: case for case, _ in TestDense.conformance_cases()}
    assert TestDense.run(cases["capture_decode[float32]"]).status == "pass"
    assert TestDense.run(cases["capture_mixed[float32]"]).status == "fail"
    TestDense.expected_failures = {"capture_mixed": "reads num_decodes"}
    assert TestDense.run(cases["capture_mixed[float32]"]).status == "xfail"


# --------------------------------------------------------------------------- the watch itself


def test_the_watch_sees_copies_between_devices_and_leaves_sized_calls_alone():
    t = torch.arange(6)
    with watch() as found:
        t.to("meta")  # the one other device a CPU has: a copy between devices
        torch.repeat_interleave(t, t, output_size=15)  # told its size
        t[torch.tensor([1, 2])]  # indexed by integers
        t.cpu()  # a host tensor's .cpu() is itself: nothing dispatched (a GPU run would see it)
    assert found == ["aten._to_copy between cpu and meta (a copy between devices)"]
