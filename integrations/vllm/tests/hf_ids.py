"""transformers' greedy ids for run_llm.PROMPTS, one prompt at a time, by a plain argmax loop:
generate(min_new_tokens=...) would forbid the EOS id, which vLLM's ignore_eos still emits."""

import torch

from run_llm import MAX_TOKENS, PROMPTS


def hf_ids(path: str) -> list[list[int]]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ids = []
    with torch.inference_mode():
        for p, n in zip(PROMPTS, MAX_TOKENS):
            seq = list(p)
            for _ in range(n):
                seq.append(int(model(torch.tensor([seq]), use_cache=False).logits[0, -1].argmax()))
            ids.append(seq[len(p):])
    return ids
