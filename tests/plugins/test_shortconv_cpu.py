"""The ``short_conv_cpu`` backend (a whole step of LFM2's gated conv in one C
call) against the core oracle and transformers' Lfm2ShortConv: ragged steps
of decodes and fresh and continuing prefills over scattered slots, widths 2
to 5 with and without bias, hidden sizes off its 16-lane vectors and 64-channel
blocks, one and two threads; and how it is listed where it cannot serve."""

from __future__ import annotations

import random

import pytest
import torch

from mixboard import ShortConvSpec
from mixboard.selection import reasons_against
from mixboard_shortconv.cpu_backend import ShortConvCpu, kernel_unusable
from test_shortconv_torch import (
    CPU, SLOTS, Runner, lfm2_module, our_layer, random_pool, random_step, random_weights, run_steps, step_meta,
)

pytestmark = pytest.mark.skipif(kernel_unusable(), reason="mixboard_shortconv._gated_conv is not built")


@pytest.mark.parametrize("hidden, width, bias", [(24, 3, False), (100, 4, True), (64, 2, False), (37, 5, True)])
@pytest.mark.parametrize("threads", [1, 2])
def test_ragged_steps_match_the_oracle(hidden, width, bias, threads):
    spec = ShortConvSpec(hidden_size=hidden, conv_width=width, conv_bias=bias)
    rng = random.Random(hidden + width)
    steps = [random_step(rng, n, max_len=70) for n in (1, 3, 8, 5)]
    steps.append(([1] * 6, [5] * 6, rng.sample(range(SLOTS), 6)))  # decodes only
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        outs, ours, ref = run_steps(Runner(ShortConvCpu, spec), spec, random_weights(spec, width), steps, seed=3)
    finally:
        torch.set_num_threads(before)
    for got, want in outs:
        assert (got - want).abs().max() <= 1e-5
    assert (ours - ref).abs().max() <= 1e-6


@pytest.mark.parametrize("bias", [False, True])
@torch.no_grad()
def test_matches_lfm2_shortconv_on_a_ragged_batch(bias):
    hidden, width, lens = 48, 3, [1, 40, 7, 130]
    _, module = lfm2_module(hidden, width, bias, seed=4)
    spec = ShortConvSpec(hidden_size=hidden, conv_width=width, conv_bias=bias)
    seqs = [torch.randn(n, hidden) for n in lens]
    got = our_layer(module, Runner(ShortConvCpu, spec), spec, torch.cat(seqs), random_pool(spec, seed=2),
                    step_meta(lens, [0] * len(lens), [9, 0, 4, 7]))
    want = torch.cat([module(s.unsqueeze(0))[0] for s in seqs])
    assert (got - want).abs().max() <= 1e-5


def test_listed_with_reasons_where_it_cannot_serve():
    from mixboard import simulate

    spec = ShortConvSpec(hidden_size=64, conv_width=3)
    assert reasons_against(ShortConvCpu, spec, CPU) == ()
    assert any("state_dtype bfloat16" in r for r in reasons_against(
        ShortConvCpu, ShortConvSpec(hidden_size=64, conv_width=3, state_dtype="bfloat16"), CPU))
    assert any("conv width 9" in r for r in reasons_against(ShortConvCpu, ShortConvSpec(hidden_size=64, conv_width=9), CPU))
    assert reasons_against(ShortConvCpu, ShortConvSpec(hidden_size=64, conv_width=3, dtype="bfloat16"), CPU)
    assert any("cpu" in r for r in reasons_against(ShortConvCpu, spec, simulate("cuda", "9.0")))
