"""``rotary_cpu`` against the kind's oracle and transformers: q and k
rotated where they lie (one call where k follows q in one buffer), partial
rotary dims, scaled frequencies, the table grown on demand, and torch's
code for what the kernel does not read."""

from __future__ import annotations

import pytest
import torch

from mixboard import RotarySpec
from mixboard.kinds.rotary import rotary_scaling
from mixboard_cpu.compiled import ROWS, kernel_unusable
from mixboard_cpu.rotary_backend import RotaryCpu
from cpu_ops import loaded, oracle

pytestmark = pytest.mark.skipif(bool(kernel_unusable(ROWS)), reason=f"{ROWS} is not built")
LLAMA3 = rotary_scaling({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 64})


def fused_qkv(tokens, heads, kv_heads, head_size, seed):
    """q, k views of one [T, (heads + 2 kv_heads) x D] buffer, as a fused product lays them, and the buffer."""
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * head_size, generator=torch.Generator().manual_seed(seed))
    q = qkv[:, :heads * head_size].view(tokens, heads, head_size)
    k = qkv[:, heads * head_size:(heads + kv_heads) * head_size].view(tokens, kv_heads, head_size)
    return q, k, qkv


@pytest.mark.parametrize("head_size, rotary_dim, scaling", [(64, None, None), (128, None, None), (64, 32, None),
                                                            (24, 24, None), (64, None, LLAMA3)])
def test_q_and_k_of_a_fused_product_rotated_in_place(head_size, rotary_dim, scaling):
    spec = RotarySpec(head_size=head_size, rotary_dim=rotary_dim, scaling=scaling)
    impl, ref = loaded(RotaryCpu, spec), oracle(spec)
    positions = torch.tensor([0, 1, 7, 300, 299, 2, 1000])
    q, k, qkv = fused_qkv(len(positions), 4, 2, head_size, head_size)
    want_q, want_k = ref.forward(positions, q.clone(), k.clone())
    v_before = qkv[:, 6 * head_size:].clone()
    got_q, got_k = impl.forward(positions, q, k)
    assert got_q.data_ptr() == q.data_ptr() and got_k.data_ptr() == k.data_ptr()  # rotated where they lie
    torch.testing.assert_close(got_q, want_q, atol=2e-6, rtol=2e-6)
    torch.testing.assert_close(got_k, want_k, atol=2e-6, rtol=2e-6)
    assert torch.equal(qkv[:, 6 * head_size:], v_before)  # v untouched


def test_matches_transformers_llama_rotary():
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    spec = RotarySpec(head_size=64, theta=500000.0)
    positions = torch.arange(40) * 3
    q, k, _ = fused_qkv(40, 4, 2, 64, 5)
    freqs = torch.outer(positions.double(), 1.0 / 500000.0 ** (torch.arange(0, 64, 2, dtype=torch.float64) / 64))
    cos, sin = torch.cat([freqs, freqs], -1).cos().float(), torch.cat([freqs, freqs], -1).sin().float()
    want_q, want_k = apply_rotary_pos_emb(q.clone(), k.clone(), cos, sin, unsqueeze_dim=1)
    got_q, got_k = loaded(RotaryCpu, spec).forward(positions, q, k)
    torch.testing.assert_close(got_q, want_q, atol=2e-6, rtol=2e-6)
    torch.testing.assert_close(got_k, want_k, atol=2e-6, rtol=2e-6)


def test_separate_q_and_k_steps_reusing_positions_and_a_growing_table():
    spec = RotarySpec(head_size=32)
    impl, ref = loaded(RotaryCpu, spec), oracle(spec)
    for positions in (torch.arange(5), torch.tensor([4, 9000, 3]), torch.tensor([], dtype=torch.int64)):
        for _ in range(2):  # the same positions object, layer after layer
            q, k = torch.randn(len(positions), 3, 32), torch.randn(len(positions), 1, 32)
            want_q, want_k = ref.forward(positions, q.clone(), k.clone())
            got_q, got_k = impl.forward(positions, q, k)
            torch.testing.assert_close(got_q, want_q, atol=2e-6, rtol=2e-6)
            torch.testing.assert_close(got_k, want_k, atol=2e-6, rtol=2e-6)


def test_what_the_kernel_does_not_read_goes_to_torchs_code():
    spec = RotarySpec(head_size=16)
    impl, ref = loaded(RotaryCpu, spec), oracle(spec)
    positions = torch.tensor([3, 1])
    for q, k, pos in ((torch.randn(2, 2, 16).double(), torch.randn(2, 1, 16).double(), positions),
                      (torch.randn(2, 2, 16), torch.randn(2, 1, 16), positions.int())):
        want_q, want_k = ref.forward(pos.long(), q.clone(), k.clone())
        got_q, got_k = impl.forward(pos, q, k)
        torch.testing.assert_close(got_q, want_q, atol=2e-6, rtol=2e-6)
        torch.testing.assert_close(got_k, want_k, atol=2e-6, rtol=2e-6)


def test_a_negative_position_is_refused():
    impl = loaded(RotaryCpu, RotarySpec(head_size=16))
    with pytest.raises(ValueError, match="position -1 is outside the table"):
        impl.forward(torch.tensor([2, -1]), torch.randn(2, 1, 16), torch.randn(2, 1, 16))
