"""The gated delta rule in PyTorch, float32: a chunked scan for prefills and one batched step for decodes.

Per value head, with S [Dk, Dv]: S_t = exp(g_t) S_{t-1} + k_t d_t^T, where the correction
d_t = beta_t (v_t - exp(g_t) S_{t-1}^T k_t), and o_t = S_t^T q_t.

Within a chunk of n tokens starting from S0, let G_t be the running sum of g and r_ti = exp(G_t - G_i)
(the decay from token i to token t, i <= t). Unrolled, S_t = exp(G_t) S0 + sum_{i<=t} r_ti k_i d_i^T, so
the corrections solve one unit lower-triangular system,

    d_t + sum_{i<t} beta_t r_ti (k_t . k_i) d_i = beta_t (v_t - exp(G_t) S0^T k_t),

and then o_t = exp(G_t) S0^T q_t + sum_{i<=t} r_ti (q_t . k_i) d_i and the chunk's last state follows.
Every head and every token of a chunk is one batched matmul; only chunks are a Python loop.
"""

from __future__ import annotations

import torch


def chunked_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                       S: torch.Tensor, chunk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One sequence. q, k [H, L, Dk], v [H, L, Dv], g, beta [H, L], S [H, Dk, Dv] (the state before it);
    float32, q and k already per value head. Returns (o [H, L, Dv], the state after it)."""
    L = q.shape[1]
    out = torch.empty(v.shape, dtype=v.dtype, device=v.device)
    for start in range(0, L, chunk):
        end = min(start + chunk, L)
        qc, kc, vc, bc = q[:, start:end], k[:, start:end], v[:, start:end], beta[:, start:end]
        G = g[:, start:end].cumsum(dim=1)  # [H, n]
        n = end - start
        causal = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
        r = torch.exp((G[:, :, None] - G[:, None, :]).masked_fill(~causal, float("-inf")))  # [H, n, n], 0 above
        decay = torch.exp(G)[..., None]  # [H, n, 1]
        system = (bc[..., None] * r * (kc @ kc.transpose(1, 2))).tril(-1)
        system.diagonal(dim1=1, dim2=2).fill_(1.0)
        rhs = bc[..., None] * (vc - decay * (kc @ S))
        d = torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)  # [H, n, Dv]
        out[:, start:end] = decay * (qc @ S) + (r * (qc @ kc.transpose(1, 2))) @ d
        last = G[:, -1:]  # [H, 1]
        S = torch.exp(last)[..., None] * S + (kc * torch.exp(last - G)[..., None]).transpose(1, 2) @ d
    return out, S


def delta_rule_step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                    S: torch.Tensor) -> torch.Tensor:
    """One token of N sequences, in place on S. q, k [N, H, Dk], v [N, H, Dv], g, beta [N, H],
    S [N, H, Dk, Dv] float32. Returns o [N, H, Dv]."""
    S.mul_(torch.exp(g)[..., None, None])
    d = beta[..., None] * (v - (k[..., None, :] @ S).squeeze(-2))  # [N, H, Dv]
    S.add_(k[..., :, None] * d[..., None, :])
    return (q[..., None, :] @ S).squeeze(-2)
