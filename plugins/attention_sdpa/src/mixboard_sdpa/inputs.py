"""The checks the ``sdpa`` impl runs on what reaches it (core's paged checks:
errors name the layer, what was expected and what arrived)."""

from __future__ import annotations

from typing import Any, Mapping

import torch

from mixboard.kinds.attention import AttentionSpec
from mixboard.ops.paged import check_paged_inputs

from .meta import SdpaMeta


def check_inputs(layer: str, spec: AttentionSpec, q: Any, k: Any, v: Any, state: Mapping[str, Any],
                 meta: SdpaMeta) -> tuple[torch.Tensor, torch.Tensor]:
    """Raise BackendInputError on any mismatch; return (k_cache, v_cache)."""
    return check_paged_inputs(layer, spec, q, k, v, state, meta.num_tokens, meta.block_size, meta.block_range)
