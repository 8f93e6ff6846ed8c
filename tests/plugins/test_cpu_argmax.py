"""``argmax_cpu`` against the kind's oracle: ties, NaNs, infinities, strided rows, a LM head's width."""

from __future__ import annotations

import pytest
import torch

from mixboard import ArgmaxSpec
from mixboard_cpu.compiled import ROWS, kernel_unusable
from mixboard_cpu.argmax_backend import ArgmaxCpu
from cpu_ops import loaded, oracle

pytestmark = pytest.mark.skipif(bool(kernel_unusable(ROWS)), reason=f"{ROWS} is not built")


def test_ties_nans_infinities_and_strided_rows():
    torch.manual_seed(2)
    logits = torch.randn(6, 1000)
    logits[1, 10] = logits[1, 900] = logits[1].max() + 1  # a tie: the first index wins
    logits[2, 500] = float("nan")  # a NaN counts as the largest
    logits[2, 700] = float("nan")
    logits[3] = float("-inf")
    logits[4, 999] = float("inf")
    impl, ref = loaded(ArgmaxCpu, ArgmaxSpec(vocab_size=1000)), oracle(ArgmaxSpec(vocab_size=1000))
    for x in (logits, logits[1:5], torch.randn(6, 2000)[:, ::2], torch.randn(4, 3000)[:, 1000:2000]):
        got = impl.forward(x)
        assert got.dtype == torch.int64 and torch.equal(got, ref.forward(x))


@pytest.mark.parametrize("rows", [1, 16, 37])
def test_a_vocabulary_off_the_lanes(rows):
    spec = ArgmaxSpec(vocab_size=32003)
    x = torch.randn(rows, 32003)
    assert torch.equal(loaded(ArgmaxCpu, spec).forward(x), oracle(spec).forward(x))


def test_other_dtypes_go_to_torchs_argmax():
    x = torch.randn(3, 50).double()
    assert torch.equal(loaded(ArgmaxCpu, ArgmaxSpec(vocab_size=50)).forward(x), x.argmax(-1))
