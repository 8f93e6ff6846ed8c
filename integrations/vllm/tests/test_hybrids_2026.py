"""The hybrids of 2026 in vLLM's default (compiled) mode: Falcon-H1 (attention beside Mamba-2 in
every block, its multipliers, the mixer without its own norm), GraniteMoeHybrid with experts and
its shared expert, and Nemotron-H (Mamba-2 whose norm has two groups, attention, MLP). mixboard
runs every Mamba-2 and attention layer, vLLM the rest, and the greedy ids equal vLLM alone's in
the same mode. One engine per model and side; vLLM alone's runs are the session's (conftest).

Nemotron-H with expert blocks does not start in vLLM 0.32's CPU build (its relu2 experts): through
mixboard it runs, checked against transformers in test_nemotron_h_experts.py. GraniteMoeHybrid's
gated experts stay vLLM's. The last test runs Falcon-H1 under a lock written by mixboard's own CLI,
whose layer names are not vLLM's."""

import pytest

from harness import ok, run

COMPILED = {"enforce_eager": False}

# layer -> kind of every mixer layer mixboard must run (vLLM's names)
MIXERS = {
    # vLLM numbers Falcon-H1's Mamba-2 of block i as a layer of its own, 3 + i
    "falcon_h1": {**{f"model.layers.{i}.attn": "attention" for i in range(3)},
                  **{f"model.{3 + i}.mixer": "mamba2" for i in range(3)}},
    "granite_moe_hybrid": {"model.layers.0.mixer": "mamba2", "model.layers.1.self_attn.attn": "attention",
                           "model.layers.2.mixer": "mamba2", "model.layers.3.self_attn.attn": "attention"},
    "nemotron_h_dense": {"model.layers.0.mixer": "mamba2", "model.layers.2.mixer.attn": "attention",
                         "model.layers.4.mixer": "mamba2"},
}


@pytest.fixture(scope="module")
def ours(workdir, checkpoint):
    """mixboard's compiled run of a model, once per module."""
    done = {}

    def get(name):
        if name not in done:
            done[name] = ok(run(workdir, f"{name}_compiled", checkpoint(name), None, COMPILED))
        return done[name]

    return get


@pytest.mark.parametrize("name", sorted(MIXERS))
def test_ids_equal_vllm_alone_compiled(name, ours, native):
    r = ours(name)
    assert "enforce_eager=False" in r.log and "DYNAMO_TRACE_ONCE" in r.log, "vLLM did not compile the model"
    assert r.ids == native(name, COMPILED)


@pytest.mark.parametrize("name", sorted(MIXERS))
def test_every_mamba2_and_attention_layer_runs_on_mixboard(name, ours):
    table = ours(name).table
    assert {layer: kind for layer, (kind, _, _) in table.items()} == MIXERS[name]
    assert all(why == "highest priority available" for _, _, why in table.values()), table


def test_a_falcon_h1_lock_written_by_mixboard_is_honoured(workdir, checkpoint, native):
    """The runner names block i's Mamba-2 ``model.layers.i.mamba``, vLLM ``model.{3 + i}.mixer``:
    the lock's layers pair with vLLM's by kind in block order, and vLLM runs them as locked."""
    import os
    import subprocess
    import sys

    path = checkpoint("falcon_h1")
    lock = os.path.join(workdir, "falcon_h1.lock")
    made = subprocess.run([sys.executable, "-m", "mixboard_runner", "lock", path, "--backend", "mamba2=mamba2_torch",
                           "-o", lock, "--force"], capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if not k.startswith("MIXBOARD_")})
    assert made.returncode == 0, made.stderr[-3000:]
    r = ok(run(workdir, "falcon_h1_lock", path, {"MIXBOARD_LOCK": lock}, COMPILED))
    assert r.ids == native("falcon_h1", COMPILED)
    assert {layer: backend for layer, (_, backend, why) in r.table.items() if why == "forced by lock"} == {
        **{f"model.{3 + i}.mixer": "mamba2_torch" for i in range(3)},
        **{f"model.layers.{i}.attn": "sdpa_cpu" for i in range(3)}}
