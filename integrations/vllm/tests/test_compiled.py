"""vLLM's default mode: the model compiled (CPU: dynamo traced once, then inductor), every mixer
call one opaque op that runs the planned backend each step. Greedy ids equal vLLM alone in the
same mode, on a hybrid (Mamba2 + attention), llama and LFM2, on one and two ranks, with prefix
caching on (vLLM's default) and off. The reference is one run of vLLM alone per model in that mode
(one rank, its defaults): every configuration of the model must give its ids."""

import re

import pytest

from harness import ok, run

COMPILED = {"enforce_eager": False}
TP2 = {"VLLM_CPU_OMP_THREADS_BIND": "0|1"}  # one core a rank (field notes: vLLM on CPU)

CASES = [
    ("granite_hybrid", {}, {}),
    ("granite_hybrid", {"enable_prefix_caching": False}, {}),
    ("granite_hybrid", {"tensor_parallel_size": 2}, TP2),
    ("llama", {}, {}),
    ("llama", {"enable_prefix_caching": False}, {}),
    ("llama", {"tensor_parallel_size": 2}, TP2),
    ("lfm2", {}, {}),
    ("lfm2", {"enable_prefix_caching": False}, {}),
    ("lfm2", {"tensor_parallel_size": 2}, TP2),
]


@pytest.fixture(scope="module")
def compiled(workdir, checkpoint):
    """mixboard's run of a case, once per module (the cache test reads the hybrid's log again)."""
    done = {}

    def get(name, extra, env):
        key = (name, tuple(sorted(extra.items())))
        if key not in done:
            tag = f"{name}_compiled" + "".join(f"_{k}={v}" for k, v in sorted(extra.items()))
            done[key] = ok(run(workdir, tag, checkpoint(name), env, {**COMPILED, **extra}))
        return done[key]

    return get


@pytest.mark.parametrize("name, extra, env", CASES,
                         ids=[f"{n}-{'-'.join(f'{k}={v}' for k, v in x.items()) or 'default'}" for n, x, _ in CASES])
def test_compiled_ids_equal_vllm_alone_compiled(name, extra, env, compiled, native):
    r = compiled(name, extra, env)
    assert "enforce_eager=False" in r.log and "DYNAMO_TRACE_ONCE" in r.log, "vLLM did not compile the model"
    assert r.ids == native(name, COMPILED)  # vLLM alone's compiled run of the model, one rank, prefix caching on
    ranks = extra.get("tensor_parallel_size", 1)
    assert len(r.fingerprints) == ranks and len(set(r.fingerprints.values())) == 1


def _saved_graph(log: str) -> str:
    m = re.search(r"saved AOT compiled function to (\S+)", log)
    assert m, "vLLM saved no compiled model: its compile cache works otherwise now"
    return m.group(1)


def test_a_model_compiled_without_mixboard_is_not_reused_with_it(compiled, native):
    """vLLM keys its compile cache by the config and the traced files; a graph compiled with the
    integration off would run vLLM's own mixers under mixboard's name. The harness gives every run
    of the session one cache folder, so the two runs could share a graph if the key allowed it:
    they share everything else (model, configuration, vLLM's variables)."""
    native("granite_hybrid", COMPILED)
    theirs = native.runs[("granite_hybrid", '{"enforce_eager": false}', "{}")].log
    ours = compiled("granite_hybrid", {}, {}).log
    assert _saved_graph(ours) != _saved_graph(theirs)
