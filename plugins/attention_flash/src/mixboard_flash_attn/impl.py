"""The ``flash_attn`` impl: write the step's K/V into the paged cache, then
one flash_attn_varlen_func call for all sequences, prefills and decodes alike.

flash-attn 2 has no helper that writes a ragged step into a paged cache
(vLLM ships its own kernel for that), so the write is one index_copy_ per pool
(an index_put_ by block and offset where the pools' blocks sit in larger
pages). The paged kernel itself reads each pool's block stride
(``k_batch_stride = k.stride(0)`` in flash-attn's mha_varlen_fwd), so such
pools go to it as they are, with no copy.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import torch

from mixboard.kinds.attention import AttentionImpl, AttentionSpec
from mixboard.metadata import CommonBatchMetadata
from mixboard.ops.checks import BackendInputError
from mixboard.ops.paged import write_kv

from .inputs import check_inputs
from .meta import FlashMeta, build_meta


class FlashAttentionImpl(AttentionImpl):
    def __init__(self, spec: AttentionSpec, varlen: Callable):
        if not isinstance(spec, AttentionSpec):
            raise TypeError(f"the flash_attn backend serves attention layers, not a {type(spec).__name__}")
        self.spec = spec
        self.varlen = varlen  # flash_attn.flash_attn_varlen_func
        self.scale = spec.softmax_scale
        # flash-attn's window counts keys left of the query; ours counts the query too
        self.window = (spec.sliding_window - 1, 0) if spec.sliding_window is not None else (-1, -1)
        self.softcap = spec.logits_soft_cap or 0.0  # 0.0 turns it off

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, state: Mapping[str, torch.Tensor],
                meta: Any) -> torch.Tensor:
        if isinstance(meta, CommonBatchMetadata):  # called without the builder (tests, one-off use)
            meta = build_meta(meta)
        if not isinstance(meta, FlashMeta):
            raise BackendInputError(f"{self.layer_name}: meta must be the step's CommonBatchMetadata or what the "
                                    f"flash_attn builder made of it, got {type(meta).__name__}")
        k_cache, v_cache = check_inputs(self.layer_name, self.spec, q, k, v, state, meta)
        where = None if k_cache.is_contiguous() and v_cache.is_contiguous() else meta.token_blocks()
        write_kv(k_cache, v_cache, meta.slot_mapping, k, v, where)
        return self.varlen(
            q, k_cache, v_cache,
            cu_seqlens_q=meta.cu_seqlens_q,
            cu_seqlens_k=meta.cu_seqlens_k,
            max_seqlen_q=meta.max_seqlen_q,
            max_seqlen_k=meta.max_seqlen_k,
            dropout_p=0.0,
            softmax_scale=self.scale,
            causal=self.spec.causal,
            window_size=self.window,
            softcap=self.softcap,
            block_table=meta.block_table,
        )
