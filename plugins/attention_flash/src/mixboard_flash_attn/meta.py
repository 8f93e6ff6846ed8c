"""What flash_attn_varlen_func needs per step, built once per step per group.

The paged form of the varlen kernel takes the whole cache pools as k and v,
``cu_seqlens_k`` as the running sum of each sequence's *total* length
(context + new) and the block table in int32; query i of a sequence of
seqlen_q new tokens is aligned bottom-right (it sits at position
seqlen_k - seqlen_q + i), which is exactly a prefill continuing its context.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from mixboard.metadata import CommonBatchMetadata
from mixboard.ops.checks import BackendInputError
from mixboard.ops.paged import token_blocks

from .paging import PAGE_MULTIPLE


@dataclass
class FlashMeta:
    common: CommonBatchMetadata
    num_tokens: int
    block_size: int
    slot_mapping: torch.Tensor  # int64 [T]: where each new token's k, v go
    cu_seqlens_q: torch.Tensor  # int32 [N + 1]
    cu_seqlens_k: torch.Tensor  # int32 [N + 1]
    max_seqlen_q: int
    max_seqlen_k: int
    block_table: torch.Tensor  # int32 [N, max_blocks], contiguous
    block_range: tuple[int, int]  # smallest and largest block id the step reads or writes
    _token_blocks: tuple[torch.Tensor, torch.Tensor] | None = field(default=None, repr=False)

    def token_blocks(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(block, offset) of each new token's slot, for pools whose blocks sit apart: made on first use,
        then shared by every layer of the group this step (two small kernels, not two per layer)."""
        if self._token_blocks is None:
            self._token_blocks = token_blocks(self.slot_mapping, self.block_size)
        return self._token_blocks


def build_meta(common: CommonBatchMetadata) -> FlashMeta:
    if not isinstance(common, CommonBatchMetadata):
        raise TypeError(f"the flash_attn builder takes the step's CommonBatchMetadata, not {type(common).__name__}")
    bs = common.block_size
    if bs % PAGE_MULTIPLE:
        raise BackendInputError(
            f"flash_attn: the paged K/V cache has blocks of {bs} tokens, but flash-attn's paged kernel needs a "
            f"block size that is a multiple of {PAGE_MULTIPLE}; run with block_size={PAGE_MULTIPLE} (or a multiple), "
            f"or force another attention backend (--backend attention=sdpa)")
    table = common.block_table.to(torch.int32).contiguous()
    return FlashMeta(
        common=common,
        num_tokens=common.num_tokens,
        block_size=bs,
        slot_mapping=common.slot_mapping.long(),
        cu_seqlens_q=common.query_start_loc.to(torch.int32),
        cu_seqlens_k=F.pad(torch.cumsum(common.seq_lens, 0, dtype=torch.int32), (1, 0)),
        max_seqlen_q=common.max_query_len,
        max_seqlen_k=common.max_seq_len,
        block_table=table,
        block_range=common.block_range,
    )
