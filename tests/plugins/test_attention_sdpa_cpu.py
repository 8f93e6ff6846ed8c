"""The ``sdpa_cpu`` backend (decodes and causal prefills in a C kernel over the paged cache) against
the core oracle, on what the conformance kit's short cases do not reach:
contexts of several of the kernel's 64-key chunks, blocks shuffled through
the pool, GQA and MQA, windows and soft-caps, one and two threads; and how
it is listed where it cannot serve."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from mixboard import AttentionSpec, simulate
from mixboard.selection import reasons_against
from mixboard.testing import AttentionOracle
from mixboard_sdpa import SdpaAttention, SdpaCpuAttention
from mixboard_sdpa.cpu_backend import kernel_unusable
from attention_cases import decode_schedule, max_error, random_schedule, random_seqs, run_schedule

pytestmark = pytest.mark.skipif(bool(kernel_unusable()), reason="mixboard_sdpa._paged_decode is not built")

SPECS = {
    "gqa": AttentionSpec(num_heads=8, num_kv_heads=2, head_size=64),
    "mqa": AttentionSpec(num_heads=6, num_kv_heads=1, head_size=24),
    "window": AttentionSpec(num_heads=4, num_kv_heads=2, head_size=32, sliding_window=70),
    "soft_cap_scale": AttentionSpec(num_heads=4, num_kv_heads=4, head_size=16, logits_soft_cap=5.0, scale=0.3),
    "head_256": AttentionSpec(num_heads=2, num_kv_heads=1, head_size=256),
    # prefill runs of these take the kernel's tiled path (head size 64 or 128, a group dividing 16)
    "mha_128": AttentionSpec(num_heads=3, num_kv_heads=3, head_size=128),
    "group_16": AttentionSpec(num_heads=16, num_kv_heads=1, head_size=64),
}
LENGTHS = [1, 2, 63, 64, 65, 130, 200]  # chunk edges of the kernel (64 keys)


def matches_the_oracle(spec, seqs, schedule, threads):
    """Run the schedule through sdpa_cpu on `threads` threads and hold outputs and cache to the core
    oracle's (float64, rounded to the layer's dtype: in bfloat16 the kernel's float32 sums may round
    the other way, one bfloat16 step); returns sdpa_cpu's metadata of every step."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        got, state, metas = run_schedule(SdpaCpuAttention, spec, seqs, schedule, block_size=16)
    finally:
        torch.set_num_threads(before)
    ref, ref_state, _ = run_schedule(SdpaCpuAttention, spec, seqs, schedule, block_size=16, impl=AttentionOracle(spec),
                                     use_builder=False)
    if spec.dtype == "float32":
        assert max_error(got, ref) <= 2e-6
    else:
        for o, r in zip(got, ref):
            torch.testing.assert_close(o, r, rtol=2 ** -7, atol=1e-5)
    for key in state:
        assert torch.equal(state[key], ref_state[key]), key
    return metas


@pytest.mark.parametrize("name", SPECS)
@pytest.mark.parametrize("threads", [1, 2])
def test_long_decodes_match_the_oracle(name, threads):
    spec = SPECS[name]
    schedule = decode_schedule(LENGTHS, prompts=[1, 1, 40, 60, 3, 100, 150])
    matches_the_oracle(spec, random_seqs(spec, LENGTHS, seed=3), schedule, threads)


@pytest.mark.parametrize("name", SPECS)
@pytest.mark.parametrize("threads", [1, 2])
def test_chunked_prefills_through_the_kernel_match_the_oracle(name, threads):
    """Prompts in chunks (each chunk's tokens see the earlier ones in the cache) beside decodes:
    every prefill token is a row of the kernel, which the builder's metadata says how to read."""
    spec = SPECS[name]
    schedule = random_schedule(LENGTHS, seed=13, max_batch=4, max_chunk=70)
    metas = matches_the_oracle(spec, random_seqs(spec, LENGTHS, seed=11), schedule, threads)
    assert any(m.prefill_rows is not None for m in metas)  # the kernel's prefill path ran


BF16_SPECS = {**{name: dataclasses.replace(SPECS[name], dtype="bfloat16") for name in SPECS},
              # head sizes the kernel takes at run time: a multiple of 32 (read in pairs) and not
              "head_96": AttentionSpec(num_heads=4, num_kv_heads=2, head_size=96, dtype="bfloat16"),
              "head_48": AttentionSpec(num_heads=4, num_kv_heads=2, head_size=48, dtype="bfloat16")}
needs_bf16_build = pytest.mark.skipif(bool(kernel_unusable("bfloat16")),
                                      reason="mixboard_sdpa._paged_decode_bf16 is not built")


@needs_bf16_build
@pytest.mark.parametrize("name", BF16_SPECS)
def test_bfloat16_caches_match_the_oracle(name):
    """The kernel's bfloat16 build (keys and values widened as read, float32 sums; rows of a head
    size that is a multiple of 32 read in pairs), on decodes and on chunked prefills (both of its
    paths: mha_128's and group_16's runs take the tiled one), one and two threads."""
    spec = BF16_SPECS[name]
    seqs = random_seqs(spec, LENGTHS, seed=17)
    for threads in (1, 2):
        matches_the_oracle(spec, seqs, decode_schedule(LENGTHS, prompts=[1, 1, 40, 60, 3, 100, 150]), threads)
        metas = matches_the_oracle(spec, seqs, random_schedule(LENGTHS, seed=19, max_batch=4, max_chunk=70), threads)
        assert any(m.prefill_rows is not None for m in metas)


@needs_bf16_build
def test_bfloat16_is_nearer_the_oracle_than_sdpa():
    """Against the float64 oracle, sdpa_cpu in bfloat16 (float32 sums) is at least as near as sdpa
    (torch's SDPA in bfloat16) on the same steps: the kernel loses nothing to the dtype."""
    spec = dataclasses.replace(SPECS["gqa"], dtype="bfloat16")
    seqs = random_seqs(spec, LENGTHS, seed=23)
    schedule = random_schedule(LENGTHS, seed=29, max_batch=5, max_chunk=50)
    ref, _, _ = run_schedule(SdpaCpuAttention, spec, seqs, schedule, block_size=8, impl=AttentionOracle(spec),
                             use_builder=False)
    ours, _, _ = run_schedule(SdpaCpuAttention, spec, seqs, schedule, block_size=8)
    theirs, _, _ = run_schedule(SdpaAttention, spec, seqs, schedule, block_size=8)
    assert max_error(ours, ref) <= max_error(theirs, ref)


def test_mixed_steps_agree_with_sdpa():
    spec = SPECS["gqa"]
    seqs = random_seqs(spec, LENGTHS, seed=5)
    schedule = random_schedule(LENGTHS, seed=7, max_batch=5, max_chunk=50)
    got, _, _ = run_schedule(SdpaCpuAttention, spec, seqs, schedule, block_size=8)
    ref, _, _ = run_schedule(SdpaAttention, spec, seqs, schedule, block_size=8)
    assert max_error(got, ref) <= 2e-6


def test_listed_with_reasons_where_it_cannot_serve():
    cpu, cuda = simulate("cpu"), simulate("cuda", "9.0")
    assert reasons_against(SdpaCpuAttention, SPECS["gqa"], cpu) == ()
    assert any("runs on cpu" in r for r in reasons_against(SdpaCpuAttention, SPECS["gqa"], cuda))
    f16 = AttentionSpec(num_heads=8, num_kv_heads=2, head_size=64, dtype="float16")
    assert any("supports dtypes float32, bfloat16" in r for r in reasons_against(SdpaCpuAttention, f16, cpu))
    wide = AttentionSpec(num_heads=128, num_kv_heads=1, head_size=512)
    assert reasons_against(SdpaCpuAttention, wide, cpu) == (
        "128 query heads per kv head; the kernel takes up to 64", "head_size 512 is over the kernel's 256")


@pytest.mark.parametrize("backend", [SdpaAttention, SdpaCpuAttention])
def test_a_dense_q_with_heads_outermost_gives_the_same_output(backend):
    """The contract promises only the last dimension's stride: q [T, H, D] may be a transpose of a dense
    [H, T, D]. The output is laid out on its own, not after q's strides (the kernel writes rows of H * D)."""
    from mixboard import CommonBatchMetadata
    from mixboard.kinds.attention import attention_state
    from mixboard.testing import allocate_state
    from attention_cases import make_impl

    spec = SPECS["gqa"]
    H, KV, D = spec.num_heads, spec.num_kv_heads, spec.head_size
    gen = torch.Generator().manual_seed(3)
    common = CommonBatchMetadata.build([1, 6], [5, 0], [0, 1], [[0, 1], [2, 3]], 4)  # a decode, a prompt
    q_heads_first = torch.randn(H, 7, D, generator=gen)
    k, v = torch.randn(7, KV, D, generator=gen), torch.randn(7, KV, D, generator=gen)
    pools = {name: torch.randn(pool.shape, generator=gen)
             for name, pool in allocate_state(attention_state(spec), 4, 4).items()}
    outs = []
    for q in (q_heads_first.transpose(0, 1), q_heads_first.transpose(0, 1).contiguous()):
        state = {name: pool.clone() for name, pool in pools.items()}
        outs.append(make_impl(backend, spec).forward(q, k, v, state, common))
    assert outs[0].shape == (7, H, D)
    torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=0)
