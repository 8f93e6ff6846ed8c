"""The ``sdpa_cpu`` impl: ``sdpa``'s, with the step's decodes run by the
paged decode kernel (``_paged_decode.c``) straight from the cache blocks."""

from __future__ import annotations

import torch

from .impl import SdpaAttentionImpl
from .meta import SdpaMeta

from . import _paged_decode  # noqa: E402  (after torch: the kernel then shares torch's OpenMP runtime)


class SdpaCpuAttentionImpl(SdpaAttentionImpl):
    def _decodes(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, out: torch.Tensor,
                 meta: SdpaMeta) -> None:
        n = meta.common.num_decodes
        if not n:
            return
        spec, common = self.spec, meta.common
        rows = q[:n]
        if rows.stride(2) != 1 or rows.stride(1) != spec.head_size:
            rows = rows.contiguous()
        table, lens = common.block_table, common.seq_lens  # int32, built contiguous by CommonBatchMetadata
        _paged_decode.decode(rows.data_ptr(), rows.stride(0), n, spec.num_heads, spec.num_kv_heads, spec.head_size,
                             k_cache.data_ptr(), v_cache.data_ptr(), k_cache.shape[1], table.data_ptr(),
                             table.stride(0), lens.data_ptr(), out.data_ptr(), out.stride(0), float(self.scale),
                             self.window or 0, float(spec.logits_soft_cap or 0.0))
