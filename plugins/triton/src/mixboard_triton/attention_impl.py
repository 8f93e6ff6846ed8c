"""The ``triton_attn`` impl: store the step's k, v in the cache, then one kernel launch.

The builder is the default one: the kernel reads the step's common metadata
(query_start_loc, seq_lens, block_table) as it is, so there is nothing to plan.
"""

from __future__ import annotations

from typing import Mapping

import torch

from mixboard.kinds.attention import AttentionImpl, AttentionSpec
from mixboard.metadata import CommonBatchMetadata
from mixboard.ops.checks import BackendInputError
from mixboard.ops.paged import check_paged_inputs, token_blocks, write_kv

from ._attention import paged_attention


class TritonAttentionImpl(AttentionImpl):
    def __init__(self, spec: AttentionSpec):
        self.spec = spec
        self.scale = spec.softmax_scale

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, state: Mapping[str, torch.Tensor],
                meta: CommonBatchMetadata) -> torch.Tensor:
        if not isinstance(meta, CommonBatchMetadata):
            raise BackendInputError(f"{self.layer_name}: meta must be the step's CommonBatchMetadata, "
                                    f"got {type(meta).__name__}")
        k_cache, v_cache = check_paged_inputs(self.layer_name, self.spec, q, k, v, state, meta.num_tokens,
                                              meta.block_size, meta.block_range)
        contiguous = k_cache.is_contiguous() and v_cache.is_contiguous()
        where = None if contiguous else token_blocks(meta.slot_mapping, meta.block_size)
        write_kv(k_cache, v_cache, meta.slot_mapping, k, v, where)
        spec = self.spec
        return paged_attention(q, k_cache, v_cache, meta.block_table, meta.query_start_loc, meta.seq_lens,
                               meta.max_query_len, scale=self.scale, causal=spec.causal, window=spec.sliding_window,
                               soft_cap=spec.logits_soft_cap)
