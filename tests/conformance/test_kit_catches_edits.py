"""Nothing a backend receives may change: known edits planted in copies of
the first-party portable backends must fail the kit, with a message that
names what was changed. Each bug leaves the numbers right (or right until
a later layer or step), so only the kit's read-only checks can see it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest
import torch

from mixboard.ops.causal_conv import causal_conv1d, causal_conv1d_step
from mixboard.testing.conformance import run_suite
from mixboard_mamba1.torch_backend import Mamba1Torch
from mixboard_sdpa.backend import SdpaAttention
from mixboard_sdpa.impl import SdpaAttentionImpl
from mixboard_shortconv.inputs import check_inputs
from mixboard_shortconv.torch_backend import ShortConvTorch
from mixboard_shortconv.torch_impl import ShortConvTorchImpl


def first_failure(backend, select=None) -> str:
    """The reason of the first case the kit fails, in float32."""
    report = run_suite(backend, "cpu", ("float32",), fail_fast=True, select=select)
    failed = [r.reason for r in report.results if r.status == "fail"]
    assert failed, f"the kit passed {backend.__name__}"
    return failed[0]


def with_builder(base: type, name: str, edit) -> type:
    """A copy of ``base`` whose builder calls ``edit(common, meta)`` after building."""

    def builder(cls, spec, env):
        build = base.builder(spec, env)

        def buggy(common):
            meta = build(common)
            return edit(common, meta) or meta

        return buggy

    return type(name, (base,), {"name": name, "builder": classmethod(builder)})


def with_impl(base: type, name: str, impl) -> type:
    return type(name, (base,), {"name": name, "make_impl": classmethod(lambda cls, spec, env: impl(spec))})


# --------------------------------------------------------------------------- the common batch metadata


def clamp_padding(common, meta):
    common.block_table.clamp_(min=1)  # BUG: "padding reads block 1", in the table every group shares


def query_lens_in_place(common, meta):
    common.seq_lens_cpu.sub_(common.context_lens_cpu)  # BUG: turns the host seq_lens into query lens


def widen_block_range(common, meta):
    common.block_range = (0, common.block_range[1])  # BUG: rebinds a field every group reads


@pytest.mark.parametrize("base, edit, field", [
    (SdpaAttention, clamp_padding, "CommonBatchMetadata.block_table"),
    (Mamba1Torch, query_lens_in_place, "CommonBatchMetadata.seq_lens_cpu"),
    (SdpaAttention, widen_block_range, "CommonBatchMetadata.block_range"),
], ids=["tensor", "host_copy", "field"])
def test_a_builder_that_edits_the_common_metadata_fails(base, edit, field):
    reason = first_failure(with_builder(base, f"{base.name}_bug_{edit.__name__}", edit))
    assert "the builder changed the common batch metadata: " in reason and field in reason, reason


class ZeroesContextImpl(ShortConvTorchImpl):
    def forward(self, B, C, x, weights, state, meta):
        out = super().forward(B, C, x, weights, state, meta)
        meta.common.context_lens_cpu.zero_()  # BUG: "resets" the host context lengths it has used
        return out


def test_a_forward_that_edits_the_common_metadata_fails():
    reason = first_failure(with_impl(ShortConvTorch, "short_conv_bug_context", ZeroesContextImpl))
    # on the host the device copy is the same tensor: both fields are named
    assert "forward changed the common batch metadata: CommonBatchMetadata.context_lens, " \
           "CommonBatchMetadata.context_lens_cpu;" in reason, reason


class ReadsSequenceRowsImpl(ShortConvTorchImpl):
    edit = False

    def forward(self, B, C, x, weights, state, meta):
        rows = meta.common.sequence_rows  # made on first use: allowed, then held to its value
        if self.edit:
            rows[:, 3] = 1  # BUG: marks every sequence as continuing, in the rows every layer shares
        return super().forward(B, C, x, weights, state, meta)


class EditsSequenceRowsImpl(ReadsSequenceRowsImpl):
    edit = True


def test_a_lazy_field_may_appear_but_not_change():
    reads = with_impl(ShortConvTorch, "short_conv_reads_rows", ReadsSequenceRowsImpl)
    assert run_suite(reads, "cpu", ("float32",), select=["ragged_prefill", "shared_metadata"]).ok
    reason = first_failure(with_impl(ShortConvTorch, "short_conv_bug_rows", EditsSequenceRowsImpl))
    assert "step 1 of 1: forward changed the common batch metadata: CommonBatchMetadata.sequence_rows;" in reason, \
        reason


# --------------------------------------------------------------------------- the builder's output


@dataclass
class Queued:
    inner: object
    todo: list  # the step's sequences, for the forward to walk


class ConsumesQueueImpl(ShortConvTorchImpl):
    def forward(self, B, C, x, weights, state, meta):
        while meta.todo:  # BUG: pops the shared list, so the next layer finds it empty
            meta.todo.pop()
        return super().forward(B, C, x, weights, state, meta.inner)


class ShortConvQueued(ShortConvTorch):
    name = "short_conv_bug_queue"

    @classmethod
    def builder(cls, spec, env):
        build = super().builder(spec, env)
        return lambda common: Queued(build(common), list(range(common.num_seqs)))

    @classmethod
    def make_impl(cls, spec, env):
        return ConsumesQueueImpl(spec)


def test_a_forward_that_edits_its_builder_output_fails():
    reason = first_failure(ShortConvQueued)
    assert "step 1 of 1: forward changed its builder's output: meta.todo" in reason, reason


# --------------------------------------------------------------------------- inputs, weights and the output


class PrescaledQueryImpl(SdpaAttentionImpl):
    def __init__(self, spec):
        super().__init__(dataclasses.replace(spec, scale=1.0))
        self.real_scale = spec.softmax_scale

    def forward(self, q, k, v, state, meta):
        q.mul_(self.real_scale)  # BUG: scales the caller's q in place to run at scale 1
        return super().forward(q, k, v, state, meta)


class OutputOverQueryImpl(SdpaAttentionImpl):
    def forward(self, q, k, v, state, meta):
        return q.copy_(super().forward(q, k, v, state, meta))  # BUG: "q is dead now": reuses its memory


class FlipsWeightImpl(ShortConvTorchImpl):
    def forward(self, B, C, x, weights, state, meta):
        w = weights.conv_weight
        w.copy_(w.flip(-1))  # BUG: the kernel's tap order, written over the layer's weight
        return super().forward(B, C, x, weights.replace(conv_weight=w.flip(-1)), state, meta)


class PaddedRowsImpl(ShortConvTorchImpl):
    def forward(self, B, C, x, weights, state, meta):
        rows, width = x.shape
        # BUG: a vector kernel's rows rounded up past the view's end: clears two elements after each row
        torch.as_strided(x, (rows, width + 2), x.stride(), x.storage_offset())[:, width:].zero_()
        return super().forward(B, C, x, weights, state, meta)


def test_a_forward_that_writes_past_a_strided_input_fails():
    backend = with_impl(ShortConvTorch, "short_conv_bug_padded_rows", PaddedRowsImpl)
    reason = first_failure(backend, select=["noncontiguous"])  # its inputs have room after each row
    assert reason == ("step 1 of 4: the backend wrote outside its input 'x', into the rest of the buffer it is a "
                      "view of"), reason


@pytest.mark.parametrize("backend, message", [
    (with_impl(SdpaAttention, "sdpa_bug_prescaled_q", PrescaledQueryImpl),
     "step 1 of 1: the backend changed its input 'q' in place"),
    (with_impl(ShortConvTorch, "short_conv_bug_flipped_weight", FlipsWeightImpl),
     "step 1 of 1: the backend changed the layer's weight 'conv_weight' in place"),
    (with_impl(SdpaAttention, "sdpa_bug_output_over_q", OutputOverQueryImpl),
     "step 1 of 1: the output shares memory with input 'q'"),
], ids=["input", "weight", "aliased_output"])
def test_a_forward_that_edits_what_it_was_given_fails(backend, message):
    reason = first_failure(backend)
    assert message in reason, reason


# --------------------------------------------------------------------------- two layers, one builder output


class MemoizedConvInputImpl(ShortConvTorchImpl):
    """Memoizes B * x in the step's meta, as if it depended on the step alone."""

    attribute = "_conv_input"

    def forward(self, B, C, x, weights, state, meta):
        pool = check_inputs(self.layer_name, self.want, B, C, x, weights, state, meta)
        if not hasattr(meta, self.attribute):  # BUG: the next layer of the group gets this layer's B * x
            setattr(meta, self.attribute, B * x)
        bx = getattr(meta, self.attribute)
        if meta.all_decodes:
            conv = causal_conv1d_step(bx, weights.conv_weight, weights.conv_bias, pool, meta.decode_slots)
        else:
            conv = causal_conv1d(bx, weights.conv_weight, weights.conv_bias, pool, meta.conv_index)
        return conv.mul_(C)


class MemoizedInPublicImpl(MemoizedConvInputImpl):
    attribute = "conv_input"


def test_a_layer_that_leaves_a_trace_in_the_shared_builder_output_fails():
    # the single-layer cases pass: only a second layer on the same meta sees the trace
    backend = with_impl(ShortConvTorch, "short_conv_bug_memo", MemoizedConvInputImpl)
    report = run_suite(backend, "cpu", ("float32",), select=["mixed_batch", "shared_metadata"])
    (passed, failed) = report.results
    assert passed.status == "pass" and failed.status == "fail", failed.reason
    assert failed.reason.startswith("step 1 of 4, layer 1: its output with the builder output the layers share "
                                    "differs by "), failed.reason
    assert "the shared one differs from its own in meta._conv_input" in failed.reason, failed.reason


def test_a_public_field_added_to_the_shared_builder_output_fails_at_once():
    reason = first_failure(with_impl(ShortConvTorch, "short_conv_bug_public_memo", MemoizedInPublicImpl))
    assert "step 1 of 1: forward changed its builder's output: meta.conv_input (added)" in reason, reason


class OutputInWorkspaceImpl(SdpaAttentionImpl):
    def forward(self, q, k, v, state, meta):
        out = super().forward(q, k, v, state, meta)
        # BUG: returns a workspace of the shared meta, which the next layer writes
        return meta.buffer("out", out.shape, out).copy_(out)


def test_an_output_that_a_later_layer_overwrites_fails():
    backend = with_impl(SdpaAttention, "sdpa_bug_output_workspace", OutputInWorkspaceImpl)
    reason = first_failure(backend, select=["shared_metadata"])
    assert reason.startswith("step 1 of 4: layer 0's output changed while a later layer ran"), reason
