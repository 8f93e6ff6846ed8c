"""Prompts whose greedy ids bfloat16 rounding cannot decide, for comparing engines in bfloat16.

A tiny random checkpoint's top-1/top-2 logit margins are mostly small, and bfloat16 moves them by a
few hundredths (more where a router flips), so two correct bfloat16 engines can part on ordinary
prompts. The comparisons keep only prompts whose float32 greedy margin, by transformers on the same
weights rounded to bfloat16, stays at or above a floor at every generated step: there any correct
bfloat16 implementation gives the float32 ids."""

from __future__ import annotations

import torch

LENGTHS = (9, 30, 57)  # whole prefills; two share run_llm's 48-token step beside decodes; chunked
# what vLLM's CPU platform logs when it keeps a bfloat16 model's Mamba SSM states in float32
FLOAT32_SSM = "Reset SSM cache type to float32"


def ssm_state_in_float32() -> bool:
    """Whether vLLM's CPU platform keeps Mamba SSM states in float32 here: where the CPU has
    AVX512-BF16 (the conv state stays in the model's dtype: the mixed layout)."""
    return torch.cpu._is_avx512_bf16_supported()


def round_to_bf16(model) -> None:
    """Round every weight to bfloat16, kept in float32: transformers' float32 model and an engine's
    bfloat16 one then hold the same weights."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.bfloat16().float())


def decided_prompts(path: str, vocab: int, new_tokens: int, margin: float, per_length: int = 3,
                    candidates: int = 256) -> list:
    """[(prompt ids, float32 greedy ids)] for up to ``per_length`` of ``candidates`` random prompts
    of each of LENGTHS whose float32 top-1 margin is at least ``margin`` at each of ``new_tokens``
    steps."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    gen = torch.Generator().manual_seed(1)
    chosen = []
    with torch.inference_mode():
        for length in LENGTHS:
            seqs, margins = torch.randint(0, vocab, (candidates, length), generator=gen), []
            for _ in range(new_tokens):  # a batch of same-length prompts, no cache: plain argmax steps
                logits = model(seqs, use_cache=False).logits[:, -1]
                top = logits.topk(2, dim=-1).values
                margins.append(top[:, 0] - top[:, 1])
                seqs = torch.cat([seqs, logits.argmax(-1, keepdim=True)], dim=1)
            sure = (torch.stack(margins, 1).min(1).values >= margin).nonzero().flatten()[:per_length]
            assert len(sure) >= 2, f"only {len(sure)} prompts of {length} tokens have margins over {margin}"
            chosen += [(seqs[i, :length].tolist(), seqs[i, length:].tolist()) for i in sure]
    return chosen
