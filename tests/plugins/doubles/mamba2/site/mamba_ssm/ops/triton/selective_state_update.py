"""Double of mamba_ssm.ops.triton.selective_state_update.selective_state_update.

Semantics (mamba-ssm 2.3), for each batch row b with state record
i = state_batch_indices[b] (b without indices; a negative index is padding:
its output is zeros and no state is touched)::

    dt = softplus(dt + dt_bias) if dt_softplus else dt + dt_bias   (per head and channel)
    state[i] = exp(A * dt) * state[i] + (dt * x) (outer) B[group]     # [nheads, dim, dstate]
    out = state[i] @ C[group] + D * x;  out *= silu(z) when z is given

The kernel computes in float32, stores the state in its pool's dtype and
returns x's dtype. It treats A, dt and dt_bias as one value per head
("tie_hdim") when their head-dim (and A's dstate) strides are 0; that fact
is recorded in CALLS.
"""

import torch
import torch.nn.functional as F

from mamba_ssm import CALLS


def selective_state_update(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False,
                           state_batch_indices=None):
    has_heads = state.dim() > 3
    if state.dim() == 3:
        state = state.unsqueeze(1)
    if x.dim() == 2:
        x = x.unsqueeze(1)
    if dt.dim() == 2:
        dt = dt.unsqueeze(1)
    if A.dim() == 2:
        A = A.unsqueeze(0)
    if B.dim() == 2:
        B = B.unsqueeze(1)
    if C.dim() == 2:
        C = C.unsqueeze(1)
    if D is not None and D.dim() == 1:
        D = D.unsqueeze(0)
    if z is not None and z.dim() == 2:
        z = z.unsqueeze(1)
    if dt_bias is not None and dt_bias.dim() == 1:
        dt_bias = dt_bias.unsqueeze(0)
    _, nheads, dim, dstate = state.shape
    batch = x.shape[0]
    assert x.shape == (batch, nheads, dim)
    assert dt.shape == x.shape
    assert A.shape == (nheads, dim, dstate)
    ngroups = B.shape[1]
    assert nheads % ngroups == 0, "nheads must be divisible by ngroups"
    assert B.shape == (batch, ngroups, dstate)
    assert C.shape == B.shape
    if D is not None:
        assert D.shape == (nheads, dim)
    if z is not None:
        assert z.shape == x.shape
    if dt_bias is not None:
        assert dt_bias.shape == (nheads, dim)
    if state_batch_indices is not None:
        assert state_batch_indices.shape == (batch,)
    # as the real wrapper computes it (it reads dt_bias's stride, so dt_bias must be given)
    tie_hdim = A.stride(-1) == 0 and A.stride(-2) == 0 and dt.stride(-1) == 0 and dt_bias.stride(-1) == 0
    indices = list(range(batch)) if state_batch_indices is None else state_batch_indices.tolist()
    CALLS.append(("selective_state_update", dict(batch=batch, indices=indices, tie_hdim=tie_hdim,
                                                 dt_softplus=dt_softplus, has_z=z is not None,
                                                 indices_dtype=None if state_batch_indices is None
                                                 else state_batch_indices.dtype)))

    out = torch.empty(x.shape, dtype=x.dtype)
    per_group = nheads // ngroups
    for b, i in enumerate(indices):
        if i < 0:
            out[b] = 0
            continue
        d = dt[b].float() + (0 if dt_bias is None else dt_bias.float())
        if dt_softplus:
            d = torch.where(d <= 20.0, F.softplus(d), d)
        xb = x[b].float()
        Bh = B[b].float().repeat_interleave(per_group, dim=0)  # [nheads, dstate]
        Ch = C[b].float().repeat_interleave(per_group, dim=0)
        s = state[i].float() * torch.exp(A.float() * d[..., None]) + (d * xb)[..., None] * Bh[:, None, :]
        state[i] = s.to(state.dtype)
        o = (s * Ch[:, None, :]).sum(-1)
        if D is not None:
            o = o + xb * D.float()
        if z is not None:
            o = o * F.silu(z[b].float())
        out[b] = o.to(x.dtype)
    return out if has_heads else out.squeeze(1)
