"""vLLM settings whose steps mixboard's step contract does not describe: refused at start-up,
where the plan is made, never run.

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
        raise StartupError(f"mixboard-vllm: prefix caching with hits every {unit} tokens inside {state_block}-token "
                           f"state blocks (prefix_match_unit={cache.prefix_match_unit}): vLLM would hand a hit the "
                           f"state saved at the end of its block, as mixboard's layers save none in between; unset "
                           f"prefix_match_unit (--prefix-match-unit) or set it to {state_block}")
