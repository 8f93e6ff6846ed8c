"""What a saved SSM state adds to a prefill chunk, for kernels that always
start from zeros (mamba-ssm's selective_scan_fn has no initial state).

The scan is linear in its state, so starting from h0 instead of zeros adds,
at token t and channel d,

    sum_n C[t, n] * exp(A[d, n] * cumsum(dt)[t, d]) * h0[d, n]

to C . h before the D skip and the gate, and exp(A * sum(dt)) * h0 to the
final state. Every exponent is <= 0: decays underflow to 0, never overflow.
"""

from __future__ import annotations

import torch

# Tokens per block, so that the [tokens, d_inner, d_state] decays stay a few MB.
BLOCK_ELEMENTS = 1 << 22


def initial_state_response(dt: torch.Tensor, A: torch.Tensor, C: torch.Tensor,
                           h0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """dt: [L, D] after softplus; A: [D, N]; C: [L, N]; h0: [D, N]; all float32.
    Returns (the addition to C . h, [L, D]; the decay of h0 over the chunk, [D, N])."""
    length, dim = dt.shape
    elapsed = torch.cumsum(dt, dim=0)  # [L, D]: total dt from the chunk's start through token t
    out = dt.new_empty(length, dim)
    block = max(1, BLOCK_ELEMENTS // h0.numel())
    for start in range(0, length, block):
        stop = min(length, start + block)
        decayed = torch.exp(elapsed[start:stop].unsqueeze(-1) * A).mul_(h0)  # [Lb, D, N]
        out[start:stop] = torch.bmm(decayed, C[start:stop].unsqueeze(-1)).squeeze(-1)
    return out, torch.exp(elapsed[-1].unsqueeze(-1) * A)
