"""Test double of mamba_ssm.ops.triton.selective_state_update.selective_state_update
(the layout without heads, which mixboard-mamba1 uses)."""

import torch
import torch.nn.functional as F


def _require(condition, message):
    if not condition:
        raise AssertionError(f"selective_state_update double: {message}")


def selective_state_update(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False,
                           state_batch_indices=None):
    """state: (entries, dim, dstate), updated in place; x, dt, z: (batch, dim);
    A: (dim, dstate); B, C: (batch, dstate); D, dt_bias: (dim,);
    state_batch_indices: (batch,), row b updates state[state_batch_indices[b]]
    (a negative index skips the row and yields zeros); without it, row b updates state[b].
    Computes in float32; returns out (batch, dim) in x's dtype."""
    _require(state.dim() == 3, "this double implements state (batch, dim, dstate) only")
    batch, dim = x.shape
    dstate = state.shape[2]
    _require(state.shape[1] == dim, "state must be (entries, dim, dstate)")
    _require(dt.shape == x.shape, "dt must be like x")
    _require(tuple(A.shape) == (dim, dstate), "A must be (dim, dstate)")
    _require(tuple(B.shape) == (batch, dstate) and C.shape == B.shape, "B and C must be (batch, dstate)")
    if D is not None:
        _require(tuple(D.shape) == (dim,), "D must be (dim,)")
    if z is not None:
        _require(z.shape == x.shape, "z must be like x")
    if dt_bias is not None:
        _require(tuple(dt_bias.shape) == (dim,), "dt_bias must be (dim,)")
    if state_batch_indices is not None:
        _require(tuple(state_batch_indices.shape) == (batch,), "state_batch_indices must be (batch,)")
        rows = state_batch_indices.long()
    else:
        _require(state.shape[0] == batch, "state must be (batch, dim, dstate)")
        rows = torch.arange(batch, device=x.device)
    live = rows >= 0
    out = torch.zeros(batch, dim, dtype=torch.float32, device=x.device)
    d = dt.float() + (0 if dt_bias is None else dt_bias.float())
    if dt_softplus:
        d = torch.where(d <= 20.0, F.softplus(d), d)
    xf = x.float()
    h = state[rows[live]].float()
    h = h * torch.exp(d[live, :, None] * A.float()) + (d[live] * xf[live])[:, :, None] * B[live].float()[:, None, :]
    state[rows[live]] = h.to(state.dtype)
    y = (h * C[live].float()[:, None, :]).sum(-1)
    if D is not None:
        y = y + xf[live] * D.float()
    if z is not None:
        y = y * F.silu(z[live].float())
    out[live] = y
    return out.to(x.dtype)
