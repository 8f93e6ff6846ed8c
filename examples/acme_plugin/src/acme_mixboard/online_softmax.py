"""Attention block by block with an online softmax, over the paged cache.

For each sequence, the queries of a kv head's group are stacked
(``[kv_heads, group * new_tokens, head_size]``) and the sequence's cache
blocks are visited once, in order. A block no query may see (past the
causal limit, or before the sliding window) is skipped without being read.
For the rest, a running maximum ``m``, normalizer ``l`` and weighted sum
``acc`` are rescaled as larger logits arrive (Milakov & Gimelshein 2018;
the recurrence of FlashAttention), so the full row of logits never exists:

    m' = max(m, max_j s_j)
    l' = l * exp(m - m') + sum_j exp(s_j - m')
    acc' = acc * exp(m - m') + sum_j exp(s_j - m') v_j
    out = acc / l

Everything accumulates in float32 (float64 stays float64); the output is
rounded to the layer's dtype once.
"""

from __future__ import annotations

import torch

from mixboard.dtypes import torch_dtype
from mixboard.kinds.attention import AttentionImpl, AttentionSpec
from mixboard.ops.checks import BackendInputError
from mixboard.ops.paged import check_paged_inputs, write_kv

from .plan import AcmePlan, SeqPlan


class OnlineSoftmaxAttention(AttentionImpl):
    def __init__(self, spec: AttentionSpec):
        self.spec = spec
        self.dtype = torch_dtype(spec.dtype)
        self.work = torch.float64 if self.dtype == torch.float64 else torch.float32

    def forward(self, q, k, v, state, meta: AcmePlan):
        if not isinstance(meta, AcmePlan):
            raise BackendInputError(f"{self.layer_name}: meta must be what acme_attn's builder returns, "
                                    f"got {type(meta).__name__}")
        # mixboard's shared checks: errors name the layer, what was expected and what arrived
        k_cache, v_cache = check_paged_inputs(self.layer_name, self.spec, q, k, v, state, meta.num_tokens,
                                              meta.block_size, meta.block_range)
        # This step's keys and values go into the cache first; then every key is read from there.
        write_kv(k_cache, v_cache, meta.slot_mapping, k, v)
        out = torch.empty(q.shape, dtype=self.dtype, device=q.device)
        for seq in meta.seqs:
            out[seq.start:seq.end] = self._sequence(q[seq.start:seq.end], seq, k_cache, v_cache, meta.block_size)
        return out

    def _sequence(self, q: torch.Tensor, seq: SeqPlan, k_cache, v_cache, block_size: int) -> torch.Tensor:
        spec = self.spec
        n, heads, d = q.shape
        kvh = spec.num_kv_heads
        group = heads // kvh
        # Query head h reads kv head h // group: stack each kv head's group of queries.
        qg = q.to(self.work).reshape(n, kvh, group, d).permute(1, 2, 0, 3).reshape(kvh, group * n, d)
        q_pos = (seq.context_len + torch.arange(n, device=q.device)).repeat(group)  # [group * n]
        first_q, last_q = seq.context_len, seq.seq_len - 1

        m = torch.full((kvh, group * n), float("-inf"), dtype=self.work, device=q.device)
        l = torch.zeros_like(m)
        acc = torch.zeros((kvh, group * n, d), dtype=self.work, device=q.device)
        for j, block in enumerate(seq.blocks):
            lo = j * block_size
            hi = min(lo + block_size, seq.seq_len)  # keys past seq_len are another step's (or garbage)
            if spec.causal and lo > last_q:
                break  # no query sees this far
            if spec.sliding_window is not None and hi - 1 < first_q - spec.sliding_window + 1:
                continue  # every key here slid out of every query's window
            keys = k_cache[block, : hi - lo].to(self.work).transpose(0, 1)  # [kvh, keys, d]
            values = v_cache[block, : hi - lo].to(self.work).transpose(0, 1)
            s = torch.matmul(qg, keys.transpose(1, 2)).mul_(spec.softmax_scale)  # [kvh, group * n, keys]
            if spec.logits_soft_cap is not None:
                cap = spec.logits_soft_cap
                s = s.div_(cap).tanh_().mul_(cap)
            if spec.causal:
                k_pos = torch.arange(lo, hi, device=q.device)
                visible = k_pos[None, :] <= q_pos[:, None]
                if spec.sliding_window is not None:
                    visible &= k_pos[None, :] > q_pos[:, None] - spec.sliding_window
                s = s.masked_fill(~visible, float("-inf"))
            m_new = torch.maximum(m, s.amax(dim=-1))
            # A row that has seen no visible key yet keeps m = -inf; shift it by 0 instead (exp(-inf) = 0).
            shift = m_new.masked_fill(m_new == float("-inf"), 0.0)
            p = torch.exp(s - shift[..., None])
            rescale = torch.exp(m - shift)
            l = l * rescale + p.sum(dim=-1)
            acc = acc * rescale[..., None] + torch.matmul(p, values)
            m = m_new
        out = acc / l[..., None]  # every query sees at least one key: itself, or the whole sequence
        return out.reshape(kvh, group, n, d).permute(2, 0, 1, 3).reshape(n, heads, d).to(self.dtype)
