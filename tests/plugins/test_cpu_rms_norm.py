"""``rms_norm_cpu`` against the kind's oracle: rows, rows a wider tensor
apart, heads of a fused product read where they lie, the branch's output
added into ``residual`` as the kind allows, and torch's code for what the
kernel does not read."""

from __future__ import annotations

import pytest
import torch

from mixboard import RMSNormSpec, RMSNormWeights
from mixboard_cpu.compiled import ROWS, kernel_unusable
from mixboard_cpu.rms_norm_backend import RMSNormCpu
from cpu_ops import loaded, oracle

pytestmark = pytest.mark.skipif(bool(kernel_unusable(ROWS)), reason=f"{ROWS} is not built")


def norm(hidden, eps=1e-5, seed=0):
    spec = RMSNormSpec(hidden_size=hidden, eps=eps)
    w = RMSNormWeights(weight=torch.randn(hidden, generator=torch.Generator().manual_seed(seed)))
    return loaded(RMSNormCpu, spec, w), oracle(spec, w)


@pytest.mark.parametrize("shape", [(1, 512), (16, 512), (37, 97), (300, 97), (7, 3, 40), (0, 64)])
def test_norm_matches_the_oracle(shape):
    impl, ref = norm(shape[-1], seed=len(shape))
    x = torch.randn(shape) * 3
    before = x.clone()
    y, s = impl.forward(x, None)
    want, _ = ref.forward(x, None)
    assert s is x and torch.equal(x, before)
    torch.testing.assert_close(y, want, atol=2e-6, rtol=2e-6)


def test_rows_of_a_wider_tensor_and_heads_of_a_fused_product_read_where_they_lie():
    impl, ref = norm(16, eps=1e-6)
    qkv = torch.randn(5, 3 * 4 * 16)
    before = qkv.clone()
    for x in (qkv[:, 16:32], qkv[:, :64].view(5, 4, 16), qkv.view(5, 12, 16)[:, ::2]):  # the last: heads apart
        y, _ = impl.forward(x, None)
        assert y.shape == x.shape and y.data_ptr() != qkv.data_ptr()
        torch.testing.assert_close(y, ref.forward(x, None)[0], atol=2e-6, rtol=2e-6)
    assert torch.equal(qkv, before)


@pytest.mark.parametrize("rows, hidden", [(1, 512), (16, 40), (37, 97)])
def test_the_add_is_written_into_the_residual_and_the_sum_normalized(rows, hidden):
    impl, ref = norm(hidden, seed=rows)
    x, stream = torch.randn(rows, hidden), torch.randn(rows, hidden)  # a branch's output, the residual stream
    want, want_sum = ref.forward(x, stream)
    x_before, residual = x.clone(), stream.clone()
    y, s = impl.forward(x, residual)
    assert s is residual and torch.equal(x, x_before)  # the sum where the kind allows it, x untouched
    torch.testing.assert_close(s, want_sum, atol=0, rtol=0)
    torch.testing.assert_close(y, want, atol=2e-6, rtol=2e-6)


def test_strided_rows_and_what_the_kernel_does_not_read():
    impl, ref = norm(24)
    wide = torch.randn(6, 3 * 24)
    cases = [(wide[:, 24:48], torch.randn(6, 24)),                   # x's rows a wider tensor apart
             (torch.randn(6, 24), torch.randn(6, 3 * 24)[:, :24]),   # the residual's
             (torch.randn(6, 2, 24), torch.randn(6, 2, 24)),          # heads with an add: torch's code
             (torch.randn(6, 24), torch.randn(6, 24).double())]       # another dtype: torch's code
    for x, residual in cases:
        want, want_sum = ref.forward(x, residual)
        y, s = impl.forward(x, residual.clone())
        torch.testing.assert_close(s, want_sum.to(s.dtype), atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(y, want, atol=2e-6, rtol=2e-6)
