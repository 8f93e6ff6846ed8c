"""One vLLM engine: greedy ids for PROMPTS. ``generate`` is what engine_host.py runs for each
request; as a script, it runs one engine and writes the ids as JSON to argv[2].

Five prompts of 3 to 77 tokens, different max_tokens, max_num_seqs=3 and a 48-token budget:
steps mix decodes with fresh, chunked and continuing prefills. argv[3]: LLM() arguments over these
defaults (eager mode unless it says ``"enforce_eager": false``)."""

import json
import sys

PROMPTS = [[(7 * i + 3) % 256 for i in range(n)] for n in (5, 19, 40, 77, 3)]
MAX_TOKENS = [12, 8, 10, 9, 16]
# a sixth prompt sharing 70 tokens with the fourth: prefix-cache hits where vLLM caches prefixes
PROMPTS.append(PROMPTS[3][:70] + [1, 2, 3, 4, 5, 6, 7, 8])
MAX_TOKENS.append(10)


def generate(model: str, extra: dict, before_shutdown=None, prompts=None) -> list[list[int]]:
    """Start an engine, run PROMPTS and return the greedy ids, the engine shut down (its processes
    gone). ``before_shutdown(ids)`` runs first: engine_host.py answers its request there, so that
    the test goes on while the engine stops. ``prompts``: [prompt ids, max_tokens] pairs instead of
    PROMPTS and MAX_TOKENS."""
    from vllm import LLM, SamplingParams

    args = dict(dtype="float32", enforce_eager=True, skip_tokenizer_init=True, gpu_memory_utilization=0.1,
                max_model_len=256, max_num_seqs=3, max_num_batched_tokens=48, block_size=32)
    # 0.1: on CPU a share of the machine's memory (2.4 GiB a worker here), ample for these prompts, and
    # two ranks still start beside other processes
    llm = LLM(model=model, **{**args, **extra})  # extra {"enforce_eager": False}: vLLM's default, compiled
    todo = list(zip(PROMPTS, MAX_TOKENS)) if prompts is None else prompts
    sps = [SamplingParams(temperature=0, max_tokens=m, ignore_eos=True) for _, m in todo]
    try:
        outs = llm.generate([{"prompt_token_ids": p} for p, _ in todo], sps, use_tqdm=False)
        ids = [list(o.outputs[0].token_ids) for o in outs]
        if before_shutdown:
            before_shutdown(ids)
    finally:
        llm.llm_engine.engine_core.shutdown()
    return ids


def main():
    model, out = sys.argv[1], sys.argv[2]
    ids = generate(model, json.loads(sys.argv[3]) if len(sys.argv) > 3 else {})
    with open(out, "w") as f:
        json.dump({"ids": ids}, f)


if __name__ == "__main__":
    main()
