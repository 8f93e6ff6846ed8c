"""The ``sdpa_cpu`` impl: ``sdpa``'s, with the step's decodes and causal
prefills run by the paged kernel (``_paged_decode.c``) straight from the
cache blocks. The kernel takes each pool's block stride, so blocks that sit
in larger pages (an engine's hybrid cache) are read and written in place
too. A bfloat16 layer runs on the kernel's bfloat16 build, which reads the
cache and the query rows where they lie and writes the output rows in
bfloat16 (sums in float32, each output rounded once)."""

from __future__ import annotations

import importlib

import torch

from mixboard.ops.checks import record_stride

from .declarations import KERNELS
from .impl import SdpaAttentionImpl
from .meta import SdpaMeta


class SdpaCpuAttentionImpl(SdpaAttentionImpl):
    _blocks: tuple[int, int] = (0, 0)  # this forward's block strides of k_cache and v_cache, set by _write

    def __init__(self, spec):
        super().__init__(spec)
        self._scale, self._soft_cap = float(self.scale), float(spec.logits_soft_cap or 0.0)  # the kernel's doubles
        # the build for this layer's cache dtype; imported after torch, so it shares torch's OpenMP runtime
        self._kernel = importlib.import_module(KERNELS[spec.dtype])

    def _write(self, k_cache, v_cache, meta: SdpaMeta, k, v) -> None:
        row = self.spec.num_kv_heads * self.spec.head_size
        # Each block is contiguous (check_inputs holds the pools to the state contract); blocks are stride(0) apart.
        # Worked out once per forward (forward calls _write first), one call each for contiguous pools.
        block = k_cache.shape[1] * row
        self._blocks = (record_stride(k_cache, block), record_stride(v_cache, block))
        slots = meta.slot_mapping  # int64, checked against the pool's blocks by check_inputs
        if not (k.stride(2) == v.stride(2) == 1 and k.stride(1) == v.stride(1) == self.spec.head_size
                and slots.is_contiguous()):
            return super()._write(k_cache, v_cache, meta, k, v)
        self._kernel.write(k_cache.data_ptr(), self._blocks[0], v_cache.data_ptr(), self._blocks[1],
                           k_cache.shape[1], slots.data_ptr(), k.shape[0], row, k.data_ptr(), k.stride(0),
                           v.data_ptr(), v.stride(0))

    def _decodes(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, out: torch.Tensor,
                 meta: SdpaMeta) -> None:
        n = meta.common.num_decodes
        if n:
            common = meta.common
            self._attend(q, 0, n, k_cache, v_cache, out, common.block_table, common.seq_lens, None)

    def _prefills(self, q, k, v, k_cache, v_cache, out, meta: SdpaMeta) -> None:
        """Every prefill token as a row of the kernel that sees keys 0..its position, read from the cache
        (this step's k, v are already written there): one call for all prompts, with or without context."""
        if meta.prefill_rows is None or not self.spec.causal:  # a meta built without them; bidirectional
            return super()._prefills(q, k, v, k_cache, v_cache, out, meta)
        rows, seen = meta.prefill_rows
        n = meta.common.num_decodes
        self._attend(q, n, q.shape[0] - n, k_cache, v_cache, out, meta.common.block_table, seen, rows)

    def _attend(self, q, first, count, k_cache, v_cache, out, table, seq_lens, table_rows) -> None:
        """Rows ``first`` .. ``first + count`` of ``q`` into the same rows of ``out`` (by address: a
        view per call would cost more than the arithmetic, at one decode a step)."""
        spec = self.spec
        if q.stride(2) != 1 or q.stride(1) != spec.head_size:
            q = q.contiguous()
        size = q.element_size()  # q, out and the cache share the layer's dtype (impl.py: rows of H * D)
        # int32 and contiguous: CommonBatchMetadata and build_meta make them so
        self._kernel.decode(q.data_ptr() + first * q.stride(0) * size, q.stride(0), count, spec.num_heads,
                            spec.num_kv_heads, spec.head_size, k_cache.data_ptr(), self._blocks[0],
                            v_cache.data_ptr(), self._blocks[1], k_cache.shape[1], table.data_ptr(), table.stride(0),
                            seq_lens.data_ptr(), out.data_ptr() + first * out.stride(0) * size, out.stride(0),
                            self._scale, self.window or 0, self._soft_cap,
                            0 if table_rows is None else table_rows.data_ptr())
