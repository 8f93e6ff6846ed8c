"""The ``short_conv_cpu`` backend (a whole step of LFM2's gated conv in one C
call) against the core oracle and transformers' Lfm2ShortConv: ragged steps
of decodes and fresh and continuing prefills over scattered slots, widths 2
to 5 with and without bias, hidden sizes off its 16-lane vectors and 64-channel
blocks, one and two threads; its bfloat16 build against short_conv_torch and
the oracle; and how it is listed where it cannot serve."""

from __future__ import annotations

import random

import pytest
import torch

from mixboard import ShortConvSpec, ShortConvWeights
from mixboard.selection import reasons_against
from mixboard_shortconv import ShortConvTorch
from mixboard_shortconv.cpu_backend import ShortConvCpu, kernel_unusable
from mixboard.kinds.short_conv import short_conv_state
from mixboard.testing import ShortConvOracle
from mixboard.testing.conformance.pages import allocate_in_pages
from test_shortconv_torch import (
    CPU, SLOTS, Runner, lfm2_module, our_layer, random_inputs, random_pool, random_step, random_weights, run_steps,
    sequence_in_steps, step_meta, torch_runner,
)

pytestmark = pytest.mark.skipif(bool(kernel_unusable()), reason="mixboard_shortconv._gated_conv is not built")


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
    assert reasons_against(ShortConvCpu, ShortConvSpec(hidden_size=64, conv_width=3, dtype="bfloat16"), CPU) == ()
    # the state in the layer's dtype only, each way round
    (reason,) = reasons_against(ShortConvCpu, ShortConvSpec(hidden_size=64, conv_width=3, state_dtype="bfloat16"), CPU)
    assert "the state in the layer's dtype (float32); the layer asks for state_dtype bfloat16" in reason, reason
    (reason,) = reasons_against(ShortConvCpu, ShortConvSpec(hidden_size=64, conv_width=3, dtype="bfloat16",
                                                            state_dtype="float32"), CPU)
    assert "(bfloat16); the layer asks for state_dtype float32" in reason, reason
    assert any("conv width 9" in r for r in reasons_against(ShortConvCpu, ShortConvSpec(hidden_size=64, conv_width=9), CPU))
    assert any("float16" in r for r in reasons_against(ShortConvCpu, ShortConvSpec(hidden_size=64, conv_width=3,
                                                                                     dtype="float16"), CPU))
    assert any("cpu" in r for r in reasons_against(ShortConvCpu, spec, simulate("cuda", "9.0")))


class CountingKernel:
    """The impl's kernel module, counting its calls (a bfloat16 layer must reach the kernel, not the fallback)."""

    def __init__(self, module):
        self.module, self.calls = module, 0

    def step(self, *args):
        self.calls += 1
        return self.module.step(*args)


@pytest.mark.skipif(bool(kernel_unusable("bfloat16")), reason="mixboard_shortconv._gated_conv_bf16 is not built")
@pytest.mark.parametrize("hidden, width, bias", [(256, 3, False), (37, 5, True), (100, 2, True)])
@pytest.mark.parametrize("threads", [1, 2])
def test_bfloat16_layers_run_the_kernel_and_match_short_conv_torch(hidden, width, bias, threads):
    """Ragged steps of a bfloat16 layer over a bfloat16 pool in pages: every step runs the bfloat16 kernel;
    the pool equals short_conv_torch's bit for bit (both keep B * x rounded to bfloat16, to nearest even) and
    the bytes between records are untouched; the outputs agree to a bfloat16 rounding, and are nearer the
    float64 oracle than short_conv_torch's on average."""
    spec = ShortConvSpec(hidden_size=hidden, conv_width=width, conv_bias=bias, dtype="bfloat16")
    rng = random.Random(hidden * width)
    steps = [random_step(rng, n, max_len=70) for n in (1, 3, 8, 5)]
    steps.append(([1] * 6, [5] * 6, rng.sample(range(SLOTS), 6)))  # decodes only
    weights = random_weights(spec, seed=width)
    cpu, ref = Runner(ShortConvCpu, spec), torch_runner(spec)
    cpu.impl._kernel = counting = CountingKernel(cpu.impl._kernel)
    ours, pages = allocate_in_pages(short_conv_state(spec), SLOTS, 16, "cpu")
    ours = ours["conv"]
    ours.copy_(random_pool(spec, seed=3)["conv"])
    theirs = random_pool(spec, seed=3)["conv"]
    exact = random_pool(spec, seed=3)["conv"].double()
    oracle = ShortConvOracle(ShortConvSpec(hidden_size=hidden, conv_width=width, conv_bias=bias, dtype="float64"))
    weights64 = ShortConvWeights(weights.conv_weight.double(),
                                 None if weights.conv_bias is None else weights.conv_bias.double())
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for i, (q, c, s) in enumerate(steps):
            B, C, x = random_inputs(spec, sum(q), seed=100 + i)
            meta = step_meta(q, c, s)
            got, want = cpu(B, C, x, weights, {"conv": ours}, meta), ref(B, C, x, weights, {"conv": theirs}, meta)
            best = oracle.forward(B.double(), C.double(), x.double(), weights64, {"conv": exact}, meta)
            assert got.dtype == torch.bfloat16
            torch.testing.assert_close(got.float(), want.float(), atol=2e-2, rtol=1e-2)
            # one rounding of the output where short_conv_torch rounds the conv then the gate: nearer on average
            assert (got.double() - best).abs().mean() <= (want.double() - best).abs().mean()
            exact.copy_(ours.double())  # the next step from the same (rounded) state on every side
    finally:
        torch.set_num_threads(before)
    assert counting.calls == len(steps)
    assert torch.equal(ours.view(torch.int16), theirs.view(torch.int16))
    assert pages.changed() is None


@pytest.mark.skipif(bool(kernel_unusable("bfloat16")), reason="mixboard_shortconv._gated_conv_bf16 is not built")
@pytest.mark.parametrize("chunks", [[1, 2, 37], [20, 20], [39, 1]])
def test_bfloat16_prefill_in_chunks_equals_one_prefill_bit_for_bit(chunks):
    """The kernel rounds B * x to bfloat16 as it makes it, so a chunk's window holds what the state hands the
    next chunk: the outputs and the state do not depend on where a prefill was cut."""
    spec = ShortConvSpec(hidden_size=40, conv_width=4, conv_bias=True, dtype="bfloat16")
    weights, run = random_weights(spec, seed=2), Runner(ShortConvCpu, spec)
    whole, whole_state = sequence_in_steps(run, spec, weights, 40, [40])
    chunked, chunked_state = sequence_in_steps(run, spec, weights, 40, chunks)
    assert torch.equal(chunked.view(torch.int16), whole.view(torch.int16))
    assert torch.equal(chunked_state.view(torch.int16), whole_state.view(torch.int16))


@pytest.mark.skipif(bool(kernel_unusable("bfloat16")), reason="mixboard_shortconv._gated_conv_bf16 is not built")
def test_bfloat16_state_keeps_nan_and_infinities_where_short_conv_torch_does():
    """B * x that is NaN (inf * 0, a NaN input), infinite, or finite in float32 but past bfloat16's
    largest (rounding up to infinity), in the tokens the state keeps, on channels past the last full 16:
    the NaNs sit where short_conv_torch's do (torch writes every NaN as 0xffff, the kernel keeps the
    sign and payload's top: other bits) and every other element equals its bits."""
    spec = ShortConvSpec(hidden_size=37, conv_width=4, dtype="bfloat16")
    weights = random_weights(spec, seed=5)
    B, C, x = (t.clone() for t in random_inputs(spec, 9, seed=11))
    # 1.4140625 is a bfloat16; its square (1.99957) times 2**127 is finite in float32, past bfloat16's largest
    big, bigger = 1.4140625 * 2.0 ** 63, 1.4140625 * 2.0 ** 64
    for t, c, b, v in [(6, 33, float("inf"), 0.0), (7, 34, float("nan"), 1.0), (8, 35, big, bigger),
                       (8, 36, -float("inf"), 2.0), (7, 32, big, -bigger)]:
        B[t, c], x[t, c] = b, v
    pools = []
    for backend in (ShortConvCpu, ShortConvTorch):
        pool = random_pool(spec, seed=1)
        Runner(backend, spec)(B, C, x, weights, pool, step_meta([9], [0], [4]))
        pools.append(pool["conv"][4])
    ours, theirs = pools
    assert torch.equal(ours.isnan(), theirs.isnan()) and ours.isnan().sum() == 2
    assert ours.isinf().sum() == 3
    keep = ~ours.isnan()
    assert torch.equal(ours[keep].view(torch.int16), theirs[keep].view(torch.int16))
