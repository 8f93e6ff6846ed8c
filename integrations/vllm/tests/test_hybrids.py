"""Hybrids (attention with mamba2 or short_conv layers). vLLM lays their attention KV cache out
block-strided; the integration passes those views as they are where mixboard's contract takes pools
strided in dim 0, and refuses the model at start-up, saying why, where it does not."""

import pytest

from harness import ok, run
from hf_ids import hf_ids
from mixboard_vllm.state import strided_pools_accepted

@pytest.mark.parametrize("name, kinds", [("granite_hybrid", {"attention", "mamba2"}),
                                         ("lfm2", {"attention", "short_conv"})])
def test_hybrid(name, kinds, workdir, checkpoint, native):
    # this mixboard takes strided pools (mixboard.state): the hybrids must run, not be refused
    assert strided_pools_accepted()
    r = run(workdir, name, checkpoint(name))
    ok(r)
    assert r.ids == native(name)
    assert {kind for kind, _, _ in r.table.values()} == kinds


def test_lfm2_vllm_native_against_transformers(checkpoint, native):
    """vLLM's own LFM2 is the reference for LFM2, not transformers: they part on near-ties (here 5
    of 6 prompts agree, the mixers aside). Most must agree, or the checkpoint is read differently."""
    ours, theirs = native("lfm2"), hf_ids(checkpoint("lfm2"))
    same = [a == b for a, b in zip(ours, theirs)]
    print(f"LFM2: vLLM native equals transformers on {sum(same)} of {len(same)} prompts")
    assert len(same) == 6 and sum(same) >= 4
