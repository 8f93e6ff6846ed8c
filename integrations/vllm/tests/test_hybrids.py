"""Hybrids (attention with mamba2 or short_conv layers). vLLM lays their attention KV cache out
block-strided; the integration passes those views as they are where mixboard's contract takes pools
strided in dim 0, and refuses the model at start-up, saying why, where it does not."""

import re

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


def prefix_hit(steps: list[str], cached: int, new: int) -> bool:
    """Some step started a request from ``cached`` tokens of the prefix cache: q=new with ctx=cached."""
    for s in steps:
        q = [int(x) for x in re.search(r"q=\[([^\]]*)\]", s).group(1).split(", ")]
        c = [int(x) for x in re.search(r"ctx=\[([^\]]*)\]", s).group(1).split(", ")]
        if any(qi == new and ci == cached for qi, ci in zip(q, c)):
            return True
    return False


def test_hybrid_with_prefix_caching_and_layer_rules(workdir, checkpoint, native):
    """vLLM's 'align' mode for hybrids: a request sharing a prefix starts from cached attention
    blocks and the saved state at their end. The rules put the example vendor's attention on one
    layer and the portable mamba2 on another, beside the priority's choices."""
    rules = "model.layers.1.*=acme_attn,model.layers.2.*=mamba2_torch"
    r = ok(run(workdir, "granite_hybrid_prefix", checkpoint("granite_hybrid"), {"MIXBOARD_BACKEND": rules},
               {"enable_prefix_caching": True}))
    assert r.ids == native("granite_hybrid")
    assert r.table == {
        "model.layers.0.mixer": ("mamba2", "mamba2_cpu", "highest priority available"),
        "model.layers.1.self_attn.attn": ("attention", "acme_attn", "forced by model.layers.1.*=acme_attn"),
        "model.layers.2.mixer": ("mamba2", "mamba2_torch", "forced by model.layers.2.*=mamba2_torch"),
        "model.layers.3.self_attn.attn": ("attention", "sdpa_cpu", "highest priority available"),
    }
    # the sixth prompt (78 tokens) shares 70 with the fourth: vLLM (64-token blocks here) finds 64 cached
    assert prefix_hit(r.steps, 64, 14), "no prefix-cache hit: the prompts or vLLM's block size changed"


def test_a_hybrid_split_by_phase(workdir, checkpoint, native):
    """mamba2's prefill rows on the portable backend, its decode rows on mamba2_cpu, one state
    between them; attention the other way round."""
    rules = "mamba2@prefill=mamba2_torch,attention@decode=sdpa"
    r = ok(run(workdir, "granite_hybrid_phases", checkpoint("granite_hybrid"), {"MIXBOARD_BACKEND": rules}))
    assert r.ids == native("granite_hybrid")
    assert r.mixed_steps(), "no step mixed decodes and prefills: the prompts no longer test that"
    assert re.search(r"model\.layers\.0\.mixer\s+mamba2@prefill\s+mamba2_torch\s+forced", r.log), r.log[-3000:]
    assert re.search(r"model\.layers\.0\.mixer\s+mamba2@decode\s+mamba2_cpu\s+highest", r.log), r.log[-3000:]
    assert re.search(r"model\.layers\.1\.self_attn\.attn\s+attention@decode\s+sdpa\s+forced", r.log), r.log[-3000:]


def test_vllm_honours_a_lock_and_refuses_one_it_cannot_reproduce(workdir, checkpoint, native):
    """A lock written by mixboard's own CLI for the checkpoint: vLLM runs its mixers as locked (the
    runner's ``...self_attn`` is vLLM's ``...self_attn.attn``), or refuses to start, saying why."""
    import json
    import os
    import subprocess
    import sys

    path = checkpoint("granite_hybrid")
    lock = os.path.join(workdir, "granite.lock")
    subprocess.run([sys.executable, "-m", "mixboard_runner", "lock", path, "--backend",
                    "attention@decode=sdpa,mamba2=mamba2_torch", "-o", lock, "--force"], check=True,
                   capture_output=True, env={k: v for k, v in os.environ.items() if not k.startswith("MIXBOARD_")})
    r = ok(run(workdir, "granite_hybrid_lock", path, {"MIXBOARD_LOCK": lock}))
    assert r.ids == native("granite_hybrid")
    assert re.search(r"model\.layers\.0\.mixer\s+mamba2\s+mamba2_torch\s+forced by lock", r.log), r.log[-3000:]
    assert re.search(r"model\.layers\.1\.self_attn\.attn\s+attention@decode\s+sdpa\s+forced by lock", r.log), \
        r.log[-3000:]
    data = json.load(open(lock))
    data["backends"]["mamba2_torch"]["version"] = "0.0.1"
    json.dump(data, open(lock, "w"))
    r = run(workdir, "granite_hybrid_lock_stale", path, {"MIXBOARD_LOCK": lock})
    assert r.rc != 0 and "cannot be reproduced here" in r.log, r.log[-3000:]
    assert "mixboard-mamba2 0.0.1 in the lock" in r.log
