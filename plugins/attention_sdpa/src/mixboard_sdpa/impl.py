"""The ``sdpa`` impl: write the step's K/V into the paged cache, then attend.

Decodes (the first sequences of a step, one token each) are attended in a
few batched calls over their gathered cache blocks (see ``meta``). Each
prefill is one call: over its own k, v when it has no context (no cache
read; consecutive fresh prompts of one length share the call), else over
its blocks read back from the cache, with a bottom-right aligned causal
mask (its queries sit at positions context_len ...).
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from mixboard.kinds.attention import AttentionImpl, AttentionSpec
from mixboard.metadata import CommonBatchMetadata
from mixboard.ops.checks import BackendInputError
from mixboard.ops.paged import token_blocks, write_kv

from .attend import attend
from .inputs import check_inputs
from .meta import DecodeChunk, Prefill, SdpaMeta, build_meta, bytes_per_token


class SdpaAttentionImpl(AttentionImpl):
    def __init__(self, spec: AttentionSpec):
        if not isinstance(spec, AttentionSpec):
            raise TypeError(f"the sdpa backend serves attention layers, not a {type(spec).__name__}")
        self.spec = spec
        self.scale = spec.softmax_scale
        self.window = spec.sliding_window
        self._bytes_per_token = bytes_per_token(spec)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, state: Mapping[str, torch.Tensor],
                meta: Any) -> torch.Tensor:
        if isinstance(meta, CommonBatchMetadata):  # called without the builder (tests, one-off use)
            meta = build_meta(meta, self._bytes_per_token)
        if not isinstance(meta, SdpaMeta):
            raise BackendInputError(f"{self.layer_name}: meta must be the step's CommonBatchMetadata or what the "
                                    f"sdpa builder made of it, got {type(meta).__name__}")
        k_cache, v_cache = check_inputs(self.layer_name, self.spec, q, k, v, state, meta)
        self._write(k_cache, v_cache, meta, k, v)

        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)  # rows of H * D, whatever q's strides
        self._decodes(q, k_cache, v_cache, out, meta)
        if meta.prefills:
            self._prefills(q, k, v, k_cache, v_cache, out, meta)
        return out

    def _write(self, k_cache, v_cache, meta: SdpaMeta, k, v) -> None:
        """This step's k, v into their cache slots (``sdpa_cpu`` does it in C). Pools whose blocks sit apart
        are indexed by (block, offset), worked out once per step for every layer of the group."""
        where = None
        if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
            where = meta.mask(("token_blocks",), lambda: token_blocks(meta.slot_mapping, meta.block_size))
        write_kv(k_cache, v_cache, meta.slot_mapping, k, v, where)

    def _prefills(self, q, k, v, k_cache, v_cache, out, meta: SdpaMeta) -> None:
        """The step's prefill rows into ``out``: sdpa per run of prompts (a continuing one over its
        gathered blocks); ``sdpa_cpu`` overrides it with its kernel over the cache."""
        for i, run in enumerate(meta.prefills):
            self._prefill(i, run, q, k, v, k_cache, v_cache, out, meta)

    def _decodes(self, q, k_cache, v_cache, out, meta: SdpaMeta) -> None:
        """The step's decode rows (the first ``num_decodes``) into ``out``: here in batched chunks over
        gathered blocks; ``sdpa_cpu`` overrides it with a kernel that reads the blocks in place."""
        for i, chunk in enumerate(meta.decode_chunks):
            self._decode(i, chunk, q, k_cache, v_cache, out, meta)

    def _decode(self, i: int, chunk: DecodeChunk, q, k_cache, v_cache, out, meta: SdpaMeta) -> None:
        n, L = chunk.rows.numel(), chunk.num_keys
        bs, kvh, d = k_cache.shape[1:]
        # [n, L, Hkv, D] gathered block by block into reused workspaces, seen as [n, Hkv, L, D] without a copy
        shape = (chunk.blocks.numel(), bs, kvh, d)
        keys = torch.index_select(k_cache, 0, chunk.blocks, out=meta.buffer("k", shape, k_cache))
        values = torch.index_select(v_cache, 0, chunk.blocks, out=meta.buffer("v", shape, v_cache))
        keys, values = (t.view(n, L, kvh, d).transpose(1, 2) for t in (keys, values))
        if chunk.same_len is not None and self.window is None:
            # one length for all: drop the padded tail instead of masking it (the kernel's unmasked path is faster)
            keys, values, mask = keys[:, :, :chunk.same_len], values[:, :, :chunk.same_len], None
        else:
            mask = meta.mask(("decode", i, self.window), lambda: self._decode_mask(chunk))
        res = attend(q.index_select(0, chunk.rows).unsqueeze(2), keys, values, mask,
                     causal=False, scale=self.scale, soft_cap=self.spec.logits_soft_cap)
        out.index_copy_(0, chunk.rows, res.squeeze(2))

    def _decode_mask(self, chunk: DecodeChunk) -> torch.Tensor:
        # The decode token is the last of its sequence: it sees every key (causal or not), or the last `window`.
        pos = torch.arange(chunk.num_keys, device=chunk.seq_lens.device)[None, :]
        visible = pos < chunk.seq_lens
        if self.window is not None:
            visible &= pos >= chunk.seq_lens - self.window
        return visible[:, None, None, :]  # [n, 1, 1, L]

    def _prefill(self, i: int, run: Prefill, q, k, v, k_cache, v_cache, out, meta: SdpaMeta) -> None:
        s, e, n, L = run.start, run.end, run.count, run.query_len
        if run.blocks is None:  # no context: the keys are exactly this step's k, v
            keys, values = k[s:e], v[s:e]
        else:  # a continuing sequence: its blocks, gathered into the step's workspaces
            shape = (run.blocks.numel(), *k_cache.shape[1:])
            keys = torch.index_select(k_cache, 0, run.blocks, out=meta.buffer("k", shape, k_cache))
            values = torch.index_select(v_cache, 0, run.blocks, out=meta.buffer("v", shape, v_cache))
            keys, values = (t.flatten(0, 1)[: run.seq_len] for t in (keys, values))
        causal = self.spec.causal
        mask = None
        if causal and (run.context_len or self.window is not None):
            mask = meta.mask(("prefill", i, self.window), lambda: self._prefill_mask(run, q.device))

        def heads_first(t):  # [n * len, heads, D] -> [n, heads, len, D], a view
            return t.view(n, -1, *t.shape[1:]).transpose(1, 2)

        res = attend(heads_first(q[s:e]), heads_first(keys), heads_first(values), mask,
                     causal=causal, scale=self.scale, soft_cap=self.spec.logits_soft_cap)
        out[s:e].view(n, L, *out.shape[1:]).copy_(res.transpose(1, 2))

    def _prefill_mask(self, run: Prefill, device) -> torch.Tensor:
        q_pos = torch.arange(run.context_len, run.seq_len, device=device)[:, None]
        k_pos = torch.arange(run.seq_len, device=device)[None, :]
        visible = k_pos <= q_pos
        if self.window is not None:
            visible &= k_pos > q_pos - self.window
        return visible  # [Lq, Lk]
