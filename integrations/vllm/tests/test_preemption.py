"""Preemption: with too few KV blocks for every running request, vLLM preempts the newest and
later recomputes it as a fresh prefill of its prompt and the tokens it has so far, its blocks and
state slot given to the others meanwhile. Under such a cache mixboard's greedy ids equal vLLM
alone's under the same settings, on llama in eager mode and on the hybrid in vLLM's default mode
(compiled, prefix caching on); mixboard's step trace shows the recomputation, so the test knows
that requests were preempted."""

import re

import pytest

from harness import ok, run

# four requests that each grow from 1 block of 32 tokens to 3 or 4: three run at once (run_llm's
# max_num_seqs) in 7 usable blocks, so vLLM must preempt
PROMPTS = [[[(7 * i + 3 + 11 * k) % 256 for i in range(20 + 3 * k)], 90 - 5 * k] for k in range(4)]
TIGHT = {"max_model_len": 128, "num_gpu_blocks_override": 8}


def prefilled(steps: list[str]) -> int:
    """Tokens run as prefill rows (every row after a step's decodes), counted once per step."""
    total = 0
    for step in steps:
        if " paged " not in step:  # a hybrid's slot groups trace the same step again
            continue
        decodes = int(re.search(r"decodes=(\d+)", step).group(1))
        q = [int(x) for x in re.search(r"q=\[([^\]]*)\]", step).group(1).split(",")]
        total += sum(q[decodes:])
    return total


@pytest.mark.parametrize("name, mode", [("llama", {}), ("granite_hybrid", {"enforce_eager": False})],
                         ids=["llama-eager", "hybrid-compiled"])
def test_preempted_requests_are_recomputed_to_vllm_alones_ids(workdir, checkpoint, name, mode):
    settings = {**TIGHT, **mode}
    alone = ok(run(workdir, f"{name}_preempt_native", checkpoint(name), {"MIXBOARD_VLLM": "0"}, settings,
                   prompts=PROMPTS))
    r = ok(run(workdir, f"{name}_preempt", checkpoint(name), {}, settings, prompts=PROMPTS))
    prompt_tokens = sum(len(p) for p, _ in PROMPTS)
    assert prefilled(r.steps) > prompt_tokens, "no request was recomputed: the cache no longer forces preemption"
    assert r.ids == alone.ids
