"""The quick mode's cases at real sizes catch the bugs that only show there:
each bug is planted in a copy of a first-party portable backend and must
fail the new case named, while the unmodified backend passes it (see
test_kit_catches_bugs.py) and, where the bug is one of size alone, the kit's
original small cases pass the buggy copy too: without the new case nothing
would have caught it.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from mixboard.testing.conformance import run_suite
from mixboard_mamba1.torch_backend import Mamba1Torch
from mixboard_mamba2.torch_backend import Mamba2Torch
from mixboard_mamba2.torch_impl import Mamba2TorchImpl
from mixboard_sdpa.backend import SdpaAttention
from mixboard_sdpa.impl import SdpaAttentionImpl
from mixboard_shortconv.torch_backend import ShortConvTorch

ORIGINAL = ["ragged_prefill", "decode_after_prefill", "chunked_prefill", "mixed_batch", "long_prefill", "isolation",
            "noncontiguous", "shared_metadata"]


def failures(backend, cases, **kw) -> dict[str, str]:
    """{case name: reason} of the cases that fail, in float32."""
    report = run_suite(backend, "cpu", ("float32",), select=cases, **kw)
    assert {r.case.split("[")[0] for r in report.results} == set(cases)
    return {r.case.split("[")[0]: r.reason for r in report.results if r.status == "fail"}


def impl_backend(base: type, name: str, make) -> type:
    """A copy of ``base`` whose impl is ``make(spec)``."""
    return type(name, (base,), {"name": name, "make_impl": classmethod(lambda cls, spec, env: make(spec))})


def wrapped_backend(base: type, name: str, wrap) -> type:
    """A copy of ``base`` whose impl is ``wrap(base's impl, spec)``."""
    return type(name, (base,), {"name": name,
                                "make_impl": classmethod(lambda cls, spec, env: wrap(base.make_impl(spec, env), spec))})


def builder_backend(base: type, name: str, edit) -> type:
    """A copy of ``base`` whose builder's output goes through ``edit(meta, common)``."""
    def builder(cls, spec, env):
        build = base.builder(spec, env)
        return lambda common: edit(build(common), common)

    return type(name, (base,), {"name": name, "builder": classmethod(builder)})


class EditedOutput:
    """The real impl, then ``edit(out)`` on its output."""

    def __init__(self, inner, edit):
        self.inner, self.edit = inner, edit

    def forward(self, *args):
        out = self.inner.forward(*args)
        self.edit(out)
        return out


# --------------------------------------------------------------------------- a prefill past 256 tokens


class Last256KeysImpl(SdpaAttentionImpl):
    """A prefill sees only its last 256 keys, as a kernel whose key loop keeps one tile of 256 would."""

    def _prefills(self, *args):
        window, self.window = self.window, self.window or 256
        try:
            super()._prefills(*args)
        finally:
            self.window = window


def test_a_prefill_that_drops_keys_past_256_fails_prefill_300():
    bug = impl_backend(SdpaAttention, "sdpa_bug_last_256_keys", Last256KeysImpl)
    assert failures(bug, ORIGINAL) == {}  # 40 tokens at most: invisible to them
    reason = failures(bug, ["prefill_300"])["prefill_300"]
    assert "sequence 'a'" in reason and "|backend - oracle|" in reason, reason


# --------------------------------------------------------------------------- 32 and more sequences in a step


class First32DecodesImpl(SdpaAttentionImpl):
    def _decodes(self, q, k_cache, v_cache, out, meta):
        super()._decodes(q, k_cache, v_cache, out, meta)
        out[32:meta.common.num_decodes] = 0  # BUG: a launch grid of 32 sequences; later rows never written


class StatesOfFirst32:
    """A step's new states are written back for its first 32 decodes only (a
    grid of 32): later decodes give the right output, then continue from
    their old state."""

    def __init__(self, inner):
        self.inner = inner

    def forward(self, *args):
        *inputs, state, (meta, common) = args
        later = common.state_slots[32:common.num_decodes].long()
        kept = {name: pool[later].clone() for name, pool in state.items()}
        out = self.inner.forward(*inputs, state, meta)
        for name, pool in state.items():
            pool[later] = kept[name]
        return out


def states_of_first_32(base: type) -> type:
    def builder(cls, spec, env):
        build = base.builder(spec, env)
        return lambda common: (build(common), common)

    return type(f"{base.__name__}First32", (base,), {
        "name": f"{base.name}_bug_first_32_states", "builder": classmethod(builder),
        "make_impl": classmethod(lambda cls, spec, env: StatesOfFirst32(base.make_impl(spec, env)))})


@pytest.mark.parametrize("backend", [
    impl_backend(SdpaAttention, "sdpa_bug_first_32_decodes", First32DecodesImpl),
    states_of_first_32(Mamba1Torch),
    states_of_first_32(ShortConvTorch),
], ids=lambda b: b.name)
def test_a_step_that_serves_32_decodes_only_fails_many_sequences(backend):
    assert failures(backend, ORIGINAL) == {}  # 5 sequences at most
    reason = failures(backend, ["many_sequences"])["many_sequences"]
    # the 33rd decode of the step is the first one wrong: s0..s31 are served
    assert "sequence 's3" in reason, reason


# --------------------------------------------------------------------------- head sizes


class First128DimsImpl(SdpaAttentionImpl):
    def forward(self, q, k, v, state, meta):
        if q.shape[-1] > 128:  # BUG: scores from the first 128 dims (a q.k loop unrolled for 128)
            q = torch.cat([q[..., :128], q.new_zeros(*q.shape[:-1], q.shape[-1] - 128)], dim=-1)
        return super().forward(q, k, v, state, meta)


class PaddedScaleImpl(SdpaAttentionImpl):
    def __init__(self, spec):
        super().__init__(spec)
        if spec.scale is None:  # BUG: 1/sqrt of the head size padded to a power of two, the kernel's
            self.scale = 1 / math.sqrt(1 << (spec.head_size - 1).bit_length())


def test_scores_from_the_first_128_dims_fail_head_sizes_192_and_256():
    bug = impl_backend(SdpaAttention, "sdpa_bug_first_128_dims", First128DimsImpl)
    assert failures(bug, [*ORIGINAL, "shape-head128", "shape-gqa4_head64"]) == {}
    assert set(failures(bug, ["shape-head192", "shape-head256"])) == {"shape-head192", "shape-head256"}


def test_a_scale_from_the_padded_head_size_fails_head_sizes_80_96_and_192():
    bug = impl_backend(SdpaAttention, "sdpa_bug_padded_scale", PaddedScaleImpl)
    failed = failures(bug, ["shape-head80", "shape-head96", "shape-head192", "shape-head256", "shape-head128"])
    assert set(failed) == {"shape-head80", "shape-head96", "shape-head192"}  # powers of two are right


# --------------------------------------------------------------------------- block sizes and block tables


def token_positions(common) -> tuple[torch.Tensor, torch.Tensor]:
    """(sequence, position) of each token of the step."""
    starts = common.query_start_loc_cpu.long()
    seq = torch.repeat_interleave(torch.arange(common.num_seqs), starts[1:] - starts[:-1])
    pos = common.context_lens_cpu.long()[seq] + torch.arange(common.num_tokens) - starts[seq]
    return seq, pos


def blocks_of_4(meta, common):
    """K/V written where blocks of 4 tokens (the kit's default) would put them."""
    seq, pos = token_positions(common)
    table = common.block_table.long()
    column = (pos // 4).clamp(max=table.shape[1] - 1)
    return dataclasses.replace(meta, slot_mapping=table[seq, column] * common.block_size + pos % 4)


def contiguous_blocks(meta, common):
    """K/V written as if each sequence's blocks followed its first one."""
    seq, pos = token_positions(common)
    bs = common.block_size
    return dataclasses.replace(meta, slot_mapping=(common.block_table.long()[seq, 0] + pos // bs) * bs + pos % bs)


def test_a_backend_that_assumes_blocks_of_4_fails_the_other_block_sizes():
    bug = builder_backend(SdpaAttention, "sdpa_bug_blocks_of_4", blocks_of_4)
    assert failures(bug, [*ORIGINAL, "many_sequences", "prefill_300"]) == {}  # all in blocks of 4
    assert set(failures(bug, ["block_size16", "block_size7"])) == {"block_size16", "block_size7"}


def test_a_backend_that_assumes_contiguous_blocks_fails_every_case_over_several_blocks():
    bug = builder_backend(SdpaAttention, "sdpa_bug_contiguous_blocks", contiguous_blocks)
    assert failures(bug, ["consecutive_slots"]) == {}  # the one case whose blocks are handed out in order
    cases = ["long_prefill", "chunked_prefill", "block_size16", "block_size7", "prefill_300"]
    assert set(failures(bug, cases)) == set(cases)


def from_slot_0(meta, common):
    """The in-place path for consecutive slots starts at record 0, not at the first slot."""
    if meta.decode_range is None:
        return meta
    first, stop = meta.decode_range
    return dataclasses.replace(meta, decode_range=(0, stop - first))


def test_an_in_place_path_off_its_first_slot_fails_consecutive_slots():
    bug = builder_backend(ShortConvTorch, "short_conv_bug_slot_range", from_slot_0)
    assert "consecutive_slots" in failures(bug, ["consecutive_slots", "many_sequences"])


# --------------------------------------------------------------------------- state and channel widths


class First64StatesImpl(Mamba2TorchImpl):
    def _conv(self, step, xBC, weights, conv_pool):
        xbc = super()._conv(step, xBC, weights, conv_pool)
        spec = self.spec
        if spec.d_state > 64:  # BUG: y = C . h over the first 64 states (a state tile of 64)
            C = xbc[:, spec.d_inner + spec.n_groups * spec.d_state:].view(-1, spec.n_groups, spec.d_state)
            C[:, :, 64:] = 0
        return xbc


def test_a_mamba2_kernel_that_keeps_64_states_fails_the_real_d_state():
    bug = impl_backend(Mamba2Torch, "mamba2_bug_64_states", First64StatesImpl)
    assert failures(bug, [*ORIGINAL, "shape-head_dim8_d_state16"]) == {}
    cases = ["shape-head_dim64_d_state128", "shape-n_groups8", "prefill_300"]
    assert set(failures(bug, cases)) == set(cases)


def channel_grid_of_512(inner, spec):
    return EditedOutput(inner, lambda out: out[:, 512:].zero_())  # BUG: a grid over 512 channels


def tail_block_dropped(inner, spec):
    width = spec.hidden_size if hasattr(spec, "hidden_size") else spec.d_inner
    whole = width // 64 * 64
    # BUG: channels past the last whole block of 64 are skipped once there is a whole block
    return EditedOutput(inner, lambda out: out[:, whole:].zero_() if whole else None)


@pytest.mark.parametrize("base, wide, narrow", [
    (ShortConvTorch, ["shape-hidden1024", "prefill_300"], "shape-hidden200"),
    (Mamba1Torch, ["shape-d_inner1536", "prefill_300"], "shape-d_inner200"),
], ids=["short_conv", "mamba1"])
def test_channel_bugs_fail_the_real_widths(base, wide, narrow):
    grid = wrapped_backend(base, f"{base.name}_bug_512_channels", channel_grid_of_512)
    assert failures(grid, ORIGINAL) == {}  # 32 channels at most
    assert set(failures(grid, [*wide, narrow])) == set(wide)
    tail = wrapped_backend(base, f"{base.name}_bug_tail_block", tail_block_dropped)
    assert failures(tail, ORIGINAL) == {}  # under 64 channels, or no tail
    assert set(failures(tail, [*wide, narrow])) == {narrow}
