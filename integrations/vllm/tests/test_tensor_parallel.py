"""Two ranks: the same ids, the same plan on both; a rank that plans differently stops start-up."""

import re

from harness import ok, run

TP2 = {"VLLM_CPU_OMP_THREADS_BIND": "0|1"}


def test_two_ranks_same_ids_and_fingerprint(workdir, checkpoint, native):
    r = ok(run(workdir, "llama_tp2", checkpoint("llama"), TP2, {"tensor_parallel_size": 2}))
    assert r.ids == native("llama")
    fps = r.fingerprints
    assert set(fps) == {0, 1} and fps[0] == fps[1]
    assert f"all 2 ranks share fingerprint {fps[0]}" in r.log


def test_a_hybrid_on_two_ranks_gives_vllm_alones_ids(workdir, checkpoint, native):
    """Mamba2 with one group of B and C (Granite 4's layout): vLLM shards its heads over the ranks,
    so the gated norm's one group spans both, and vLLM all-reduces its variance. The integration
    leaves that norm to vLLM's layer (Mamba2Spec.gated_norm=False), or each rank would normalize
    its half alone."""
    extra = {"tensor_parallel_size": 2}
    r = ok(run(workdir, "granite_hybrid_tp2", checkpoint("granite_hybrid"), TP2, extra))
    assert r.ids == native("granite_hybrid")  # vLLM alone on one rank: the sharded norm must not change a token
    assert set(r.fingerprints) == {0, 1} and r.fingerprints[0] == r.fingerprints[1]


def test_a_rank_that_plans_differently_stops_start_up(workdir, checkpoint):
    # the skew test plugin serves attention on rank 1 only (tests/skew_plugin)
    r = run(workdir, "llama_tp2_skew", checkpoint("llama"), {**TP2, "MIXBOARD_VLLM_TEST_SKEW_RANK": "1"},
            {"tensor_parallel_size": 2})
    assert r.rc != 0 and r.ids is None
    fps = r.fingerprints
    assert set(fps) == {0, 1} and fps[0] != fps[1]
    m = re.search(r"ranks planned the model differently: rank 0 fingerprint (\w+), rank 1 fingerprint (\w+) "
                  r"\(model\.layers\.0\.self_attn\.attn: sdpa_cpu vs skew_sdpa", r.log)
    assert m and m.groups() == (fps[0], fps[1]), r.log[-3000:]


def test_a_rank_that_cannot_plan_stops_start_up_on_every_rank(workdir, checkpoint):
    # skew_sdpa exists on rank 1 only, so forcing it fails rank 0's plan; rank 1 must name rank 0's
    # reason instead of waiting in the fingerprint gather until gloo's timeout
    env = {**TP2, "MIXBOARD_VLLM_TEST_SKEW_RANK": "1", "MIXBOARD_BACKEND": "attention=skew_sdpa"}
    r = run(workdir, "llama_tp2_cannot_plan", checkpoint("llama"), env, {"tensor_parallel_size": 2}, timeout=300)
    assert r.rc != 0 and r.ids is None
    assert set(r.fingerprints) == {1}, r.log[-3000:]  # only rank 1 planned
    assert re.search(r"mixboard-vllm: rank 0 could not plan the model: .*skew_sdpa", r.log), r.log[-3000:]
    assert "start-up refused: mixboard-vllm:" in r.log
