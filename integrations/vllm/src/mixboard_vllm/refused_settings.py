"""vLLM settings whose steps mixboard's step contract does not describe: refused at start-up,
where the plan is made, never run.

* vLLM's model runner V2 (vLLM 0.32's default wherever Triton runs, so on GPU): it never
  reorders a batch decodes-first (vllm/v1/worker/gpu reads no ``reorder_batch_threshold``), the
  order every mixboard builder takes (batch.py); without Triton's CPU backend it does not start on
  CPU, so nothing of it is tested here.
* Speculative decoding: its verify rows are neither decodes nor prefills in mixboard's terms, the
  slot-state kinds keep no per-draft state, and on CUDA the batch translation reads sequence
  lengths from a host copy that async speculative decoding leaves approximate (compat.step_batch).
* Prefix-cache hits inside a state block (``prefix_match_unit`` finer than the Mamba block, in
  'align' mode): vLLM then needs states saved at those finer boundaries, which only its own
  mixers' in-forward checkpoints write (compat.base_mamba_kv_cache_spec). Without them a hit gets
  the state saved at the end of its block: wrong tokens.
"""

from __future__ import annotations

import math

from .errors import StartupError


def check_settings(vllm_config, plan) -> None:
    """Raise StartupError for a setting above; ``plan``: this process's mixboard plan."""
    from mixboard.state import SLOTS

    if getattr(vllm_config, "use_v2_model_runner", False):
        raise StartupError("mixboard-vllm: vLLM's model runner V2 is not supported: it does not order a batch "
                           f"decodes-first, as mixboard's layers take it; {_v1_fix(vllm_config)}, or set "
                           "MIXBOARD_VLLM=0 to let vLLM run this model")
    spec = getattr(vllm_config, "speculative_config", None)
    if spec is not None:
        method = getattr(spec, "method", None) or "a draft model"
        raise StartupError(f"mixboard-vllm: speculative decoding ({method}) is not supported: its verify steps are "
                           "not in mixboard's step contract; drop speculative_config (--speculative-config), or set "
                           "MIXBOARD_VLLM=0 to let vLLM run this model")
    cache = vllm_config.cache_config
    states = [g for g in plan.groups if g.state_spec.layout == SLOTS]
    if not (states and cache.enable_prefix_caching and cache.mamba_cache_mode == "align"):
        return
    state_block = cache.mamba_block_size or cache.block_size
    unit = cache.prefix_match_unit or math.gcd(cache.block_size, state_block)  # vLLM's default: the blocks' gcd
    if unit < state_block:
        why = (f"prefix_match_unit={cache.prefix_match_unit}" if cache.prefix_match_unit
               else f"the gcd of the {cache.block_size}-token attention blocks and the state blocks")
        raise StartupError(f"mixboard-vllm: prefix caching with hits every {unit} tokens inside {state_block}-token "
                           f"state blocks ({why}): vLLM would hand a hit the state saved at the end of its block, as "
                           f"mixboard's layers save none in between; set --prefix-match-unit {state_block}, or turn "
                           f"prefix caching off")


def _v1_fix(vllm_config) -> str:
    """How to get the V1 runner back: vLLM 0.32 forces V2 for two features whatever
    VLLM_USE_V2_MODEL_RUNNER says (config/vllm.py, ``use_v2_model_runner``)."""
    attention = getattr(vllm_config, "attention_config", None)
    forcing = [what for what, present in (
        ("HiSparse attention (hisparse_config in --attention-config)", getattr(attention, "hisparse_config", None)),
        ("watermarking (--watermark-config)", getattr(vllm_config, "watermark_config", None))) if present is not None]
    if forcing:
        return (f"{' and '.join(forcing)} {'run' if len(forcing) > 1 else 'runs'} on V2 only, whatever "
                f"VLLM_USE_V2_MODEL_RUNNER says: drop {'them' if len(forcing) > 1 else 'it'}")
    return "set VLLM_USE_V2_MODEL_RUNNER=0 (the V1 runner)"
