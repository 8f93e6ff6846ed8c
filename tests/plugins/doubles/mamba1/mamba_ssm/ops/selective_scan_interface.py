"""Test double of mamba_ssm.ops.selective_scan_interface.selective_scan_fn."""

import torch
import torch.nn.functional as F

FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def _require(condition, message):
    if not condition:
        raise RuntimeError(f"selective_scan_fn double: {message}")


def selective_scan_fn(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
                      return_last_state=False):
    """u, delta, z: (batch, dim, L); A: (dim, dstate) float32; B, C: (batch, dstate, L)
    or (batch, groups, dstate, L) in u's dtype; D, delta_bias: (dim,) float32.
    The scan starts from a zero state. Returns out (batch, dim, L) in u's dtype
    [and last_state (batch, dim, dstate) float32]."""
    _require(u.dtype in FLOATS, "u must be float32, float16 or bfloat16")
    _require(A.dtype == torch.float32, "A must be float32")
    batch, dim, length = u.shape
    dstate = A.shape[1]
    _require(dstate <= 256, "selective_scan only supports state dimension <= 256")
    _require(tuple(A.shape) == (dim, dstate), "A must be (dim, dstate)")
    _require(delta.dtype == u.dtype and delta.shape == u.shape, "delta must be like u")
    _require(u.stride(-1) == 1 or length == 1, "u must be contiguous along L")
    _require(delta.stride(-1) == 1 or length == 1, "delta must be contiguous along L")
    for name, t in (("B", B), ("C", C)):
        _require(t.dtype == u.dtype, f"{name} must have u's dtype")
        if t.dim() == 3:
            t = t.unsqueeze(1)
        _require(t.dim() == 4 and t.shape[0] == batch and t.shape[2:] == (dstate, length),
                 f"{name} must be (batch, dstate, L) or (batch, groups, dstate, L)")
        _require(t.stride(-1) == 1 or length == 1, f"{name} must be contiguous along L")
    if D is not None:
        _require(D.dtype == torch.float32 and tuple(D.shape) == (dim,), "D must be (dim,) float32")
    if delta_bias is not None:
        _require(delta_bias.dtype == torch.float32 and tuple(delta_bias.shape) == (dim,),
                 "delta_bias must be (dim,) float32")
    if z is not None:
        _require(z.dtype == u.dtype and z.shape == u.shape and (z.stride(-1) == 1 or length == 1),
                 "z must be like u, contiguous along L")

    def per_channel(t):  # (batch, [groups,] dstate, L) -> (batch, dim, dstate, L)
        t = t.float() if t.dim() == 4 else t.float().unsqueeze(1)
        return t.repeat_interleave(dim // t.shape[1], dim=1)

    Bf, Cf = per_channel(B), per_channel(C)
    uf, dt = u.float(), delta.float()
    if delta_bias is not None:
        dt = dt + delta_bias[:, None]
    if delta_softplus:
        dt = F.softplus(dt)
    h = u.new_zeros(batch, dim, dstate, dtype=torch.float32)
    ys = []
    for t in range(length):
        h = torch.exp(dt[:, :, t, None] * A) * h + (dt[:, :, t] * uf[:, :, t])[:, :, None] * Bf[:, :, :, t]
        ys.append((h * Cf[:, :, :, t]).sum(-1))
    out = torch.stack(ys, dim=-1) if ys else uf.new_zeros(batch, dim, 0)
    if D is not None:
        out = out + uf * D[:, None]
    if z is not None:
        out = out * F.silu(z.float())
    out = out.to(u.dtype)
    return (out, h) if return_last_state else out
