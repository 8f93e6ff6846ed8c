"""The checks the ``flash_attn`` impl runs on what reaches it, before the kernel.

Errors name the layer, what was expected and what arrived; flash-attn's own
TORCH_CHECKs name neither the layer nor the tensor's role, and an
out-of-range block id would make the kernel read another sequence's memory.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from mixboard.kinds.attention import AttentionSpec
from mixboard.ops.checks import BackendInputError
from mixboard.ops.paged import check_paged_inputs

from .meta import FlashMeta


def check_inputs(layer: str, spec: AttentionSpec, q: Any, k: Any, v: Any, state: Mapping[str, Any],
                 meta: FlashMeta) -> tuple[torch.Tensor, torch.Tensor]:
    """Raise BackendInputError on any mismatch; return (k_cache, v_cache)."""
    caches = check_paged_inputs(layer, spec, q, k, v, state, meta.num_tokens, meta.block_size, meta.block_range)
    if meta.cu_seqlens_q.device != q.device:
        raise BackendInputError(f"{layer}: the step's metadata is on {meta.cu_seqlens_q.device}, q on {q.device}")
    return caches
