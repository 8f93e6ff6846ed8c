"""The runner's row kernels (``kernels.rms_norm``, ``kernels.rotary``,
``kernels.argmax``) against torch's own operators and transformers' rotary
embedding, and the runner using them where they serve."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from mixboard_runner import kernels
from mixboard_runner.models.blocks import RMSNorm, Rotary
from mixboard_runner.sampling import SamplingParams, sample

pytestmark = pytest.mark.skipif(kernels.UNAVAILABLE is not None, reason=str(kernels.UNAVAILABLE))


@pytest.mark.parametrize("shape", [(1, 512), (16, 512), (7, 3, 40), (300, 97)])
def test_rms_norm_matches_f_rms_norm(shape):
    torch.manual_seed(len(shape))
    x, weight = torch.randn(shape) * 3, torch.randn(shape[-1])
    torch.testing.assert_close(kernels.rms_norm(x, weight, 1e-5), F.rms_norm(x, (shape[-1],), weight, 1e-5),
                               atol=2e-6, rtol=2e-6)


def test_rms_norm_of_rows_a_wider_tensor_apart():
    torch.manual_seed(2)
    wide, weight = torch.randn(6, 3 * 40), torch.randn(40)
    rows = wide[:, 40:80]  # 2-D, channels contiguous, rows 120 floats apart
    torch.testing.assert_close(kernels.rms_norm(rows, weight, 1e-5), F.rms_norm(rows, (40,), weight, 1e-5),
                               atol=2e-6, rtol=2e-6)


def test_rms_norm_of_strided_rows_and_heads():
    torch.manual_seed(0)
    qkv, weight = torch.randn(5, 3 * 4 * 16), torch.randn(16)
    q = qkv[:, : 4 * 16].view(5, 4, 16)  # a view whose rows are not evenly strided
    torch.testing.assert_close(kernels.rms_norm(q, weight, 1e-6), F.rms_norm(q, (16,), weight, 1e-6),
                               atol=2e-6, rtol=2e-6)


def test_the_runner_norm_takes_the_kernel_after_finalize():
    torch.manual_seed(1)
    norm = RMSNorm(64, 1e-5)
    norm.weight.data.normal_()
    x = torch.randn(9, 64)
    before = norm(x)
    norm.finalize()
    assert norm.native
    torch.testing.assert_close(norm(x), before, atol=2e-6, rtol=2e-6)


class _Step:  # what Rotary reads of a step
    def __init__(self, positions):
        self.max_position, self.memo = int(positions.max()), {}


@pytest.mark.parametrize("head_size, rotary_dim", [(64, 64), (128, 128), (64, 32), (24, 24)])
def test_rotary_in_place_matches_transformers(head_size, rotary_dim):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    torch.manual_seed(head_size + rotary_dim)
    heads, kv_heads, theta = 4, 2, 10000.0
    positions = torch.tensor([0, 1, 7, 300, 299, 2, 1000])
    qkv = torch.randn(len(positions), (heads + 2 * kv_heads) * head_size)
    qk = qkv[:, : (heads + kv_heads) * head_size].view(len(positions), heads + kv_heads, head_size)
    v_before, qk_before = qkv[:, (heads + kv_heads) * head_size:].clone(), qk.clone()

    inv_freq = 1.0 / theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    freqs = torch.outer(positions.double(), inv_freq)
    cos, sin = torch.cat([freqs, freqs], -1).cos().float(), torch.cat([freqs, freqs], -1).sin().float()
    q_rot, k_rot = apply_rotary_pos_emb(qk_before[:, :heads, :rotary_dim], qk_before[:, heads:, :rotary_dim],
                                        cos, sin, unsqueeze_dim=1)
    want = torch.cat([torch.cat([q_rot, k_rot], 1), qk_before[..., rotary_dim:]], -1)

    got = Rotary(head_size, theta, rotary_dim)(qk, positions, _Step(positions))
    assert got.data_ptr() == qk.data_ptr()  # rotated where it lies
    torch.testing.assert_close(got, want, atol=2e-6, rtol=2e-6)
    assert torch.equal(qkv[:, (heads + kv_heads) * head_size:], v_before)  # the rest of the buffer untouched


def test_rotary_refuses_a_position_outside_its_table():
    rotary = Rotary(64, 10000.0)
    cos, sin = rotary._table(16, torch.device("cpu"), torch.float32)
    with pytest.raises(ValueError, match="position 4096 is outside the table"):
        kernels.rotary(torch.randn(1, 2, 64), torch.tensor([4096]), cos, sin)


def test_argmax_is_torchs_with_ties_and_nans():
    torch.manual_seed(2)
    logits = torch.randn(6, 1000)
    logits[1, 10] = logits[1, 900] = logits[1].max() + 1  # a tie: the first index wins, as in torch
    logits[2, 500] = float("nan")  # a NaN counts as the largest, as in torch
    logits[3] = float("-inf")
    logits[4, 999] = float("inf")
    assert kernels.argmax(logits) == logits.argmax(-1).tolist()
    assert kernels.argmax(logits[:, ::2]) == logits[:, ::2].argmax(-1).tolist()  # strided rows


def test_greedy_sampling_takes_the_kernel():
    torch.manual_seed(3)
    logits = torch.randn(16, 32000)
    assert sample(logits, [SamplingParams()] * 16, [None] * 16) == logits.argmax(-1).tolist()


def test_huge_pages_keep_tensors_as_they_are_and_back_big_ones_with_2mb_pages():
    small = torch.arange(10.0)
    assert kernels.huge_pages(small) is small and torch.equal(small, torch.arange(10.0))
    big = kernels.huge_pages(torch.empty(16 << 20 >> 2))  # 16 MB, before its first write
    big.fill_(3.0)
    assert bool((big == 3.0).all())
    from pathlib import Path

    mode = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if mode.exists() and "[never]" not in mode.read_text():  # where Linux allows huge pages, the range is advised
        assert kernels.native.huge_pages(big.data_ptr(), big.numel() * 4) is True



def test_add_rms_norm_adds_in_place_and_normalizes_the_sum():
    x, delta, weight = torch.randn(7, 40), torch.randn(7, 40), torch.randn(40)
    total = delta.clone()
    normed = kernels.add_rms_norm(total, x, weight, 1e-5)
    torch.testing.assert_close(total, x + delta, rtol=0, atol=0)
    torch.testing.assert_close(normed, F.rms_norm(x + delta, (40,), weight, 1e-5), rtol=1e-6, atol=1e-6)


def test_norm_add_norm_is_the_add_then_the_norm_on_every_path():
    x, delta = torch.randn(5, 24), torch.randn(5, 24)
    native, plain = RMSNorm(24, 1e-5), RMSNorm(24, 1e-5)
    native.weight.data.normal_()
    plain.weight.data.copy_(native.weight.data)
    native.finalize()
    assert native.native and not plain.native
    want = F.rms_norm(x + delta, (24,), native.weight, 1e-5)
    for norm in (native, plain):
        normed, total = norm.add_norm(x, delta.clone())
        torch.testing.assert_close(total, x + delta, rtol=0, atol=0)
        torch.testing.assert_close(normed, want, rtol=1e-6, atol=1e-6)
    # a bfloat16 model with a float32 residual stream (Mamba's residual_in_fp32)
    half = RMSNorm(24, 1e-5).to(torch.bfloat16)
    normed, total = half.add_norm(x, delta.bfloat16(), fp32=True)
    assert total.dtype == torch.float32 and normed.dtype == torch.bfloat16
    torch.testing.assert_close(total, x + delta.bfloat16().float(), rtol=0, atol=0)


def test_heads_normalized_in_place_inside_a_wider_product():
    qkv = torch.randn(6, 5 * 16)  # 3 q heads, 1 k head, 1 v head of 16, as a fused product lays them
    q = qkv[:, :48].view(6, 3, 16)
    weight = torch.randn(16)
    want, untouched = F.rms_norm(q, (16,), weight, 1e-6), qkv[:, 48:].clone()
    native, plain = RMSNorm(16, 1e-6), RMSNorm(16, 1e-6)
    native.weight.data.copy_(weight)
    plain.weight.data.copy_(weight)
    native.finalize()
    for norm in (native, plain):
        again = qkv.clone()
        out = norm.heads_(again[:, :48].view(6, 3, 16))
        assert out.data_ptr() == again.data_ptr()
        torch.testing.assert_close(out, want, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(again[:, 48:], untouched, rtol=0, atol=0)
