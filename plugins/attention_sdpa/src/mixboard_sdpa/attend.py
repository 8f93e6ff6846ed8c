"""One attention call over a batch of equal-shaped problems.

``attend`` takes q ``[B, H, Lq, D]`` and k, v ``[B, Hkv, Lk, D]`` in any
strides (views of the packed tokens or of gathered cache blocks) and a
boolean ``mask`` (True = visible) broadcastable to ``[B, 1, Lq, Lk]``.
Without soft-capping it is one ``scaled_dot_product_attention`` with native
GQA. SDPA has no soft-cap, so then it computes the logits explicitly,
grouping the query heads that share a kv head instead of repeating K/V.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, *, causal: bool,
           scale: float, soft_cap: float | None) -> torch.Tensor:
    """Returns [B, H, Lq, D]. ``causal`` (top-left aligned, so only for Lq == Lk) is used when ``mask`` is None."""
    if soft_cap is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and mask is None,
                                              scale=scale, enable_gqa=q.shape[1] != k.shape[1])
    return _attend_soft_capped(q, k, v, mask, causal, scale, soft_cap)


def _attend_soft_capped(q, k, v, mask, causal, scale, cap):
    B, H, Lq, D = q.shape
    KVH, Lk = k.shape[1], k.shape[2]
    G = H // KVH
    # Half-precision inputs are computed in float32, as SDPA accumulates them.
    work = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    qg = q.to(work).reshape(B, KVH, G * Lq, D)  # heads kv * G + g share kv head kv
    logits = torch.matmul(qg, k.to(work).transpose(-1, -2)).mul_(scale / cap).tanh_().mul_(cap)
    logits = logits.view(B, KVH, G, Lq, Lk)
    if mask is None and causal:
        mask = torch.ones(Lq, Lk, dtype=torch.bool, device=q.device).tril()
    if mask is not None:
        logits.masked_fill_(~mask.reshape(mask.shape[0] if mask.dim() == 4 else 1, 1, 1, Lq, Lk), float("-inf"))
    probs = torch.softmax(logits, dim=-1).view(B, KVH, G * Lq, Lk)
    return torch.matmul(probs, v.to(work)).view(B, H, Lq, D).to(q.dtype)
