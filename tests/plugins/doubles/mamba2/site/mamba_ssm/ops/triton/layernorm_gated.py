"""Double of mamba_ssm.ops.triton.layernorm_gated.rmsnorm_fn.

Semantics (mamba-ssm 2.3): over the last dimension, in groups of group_size
channels (all of them without group_size), computed in float32::

    norm_before_gate=True:   out = rmsnorm(x) * weight (+ bias), then * silu(z)
    norm_before_gate=False:  out = rmsnorm(x * silu(z)) * weight (+ bias)

with rmsnorm(v) = v / sqrt(mean(v**2) + eps). Returns x's dtype and shape.
A group wider than 64 KB is refused, as the kernel refuses it.
"""

import torch
import torch.nn.functional as F

from mamba_ssm import CALLS


def rmsnorm_fn(x, weight, bias, z=None, eps=1e-6, group_size=None, norm_before_gate=True):
    shape = x.shape
    x2 = x.reshape(-1, shape[-1])
    M, N = x2.shape
    group_size = N if group_size is None else group_size
    assert N % group_size == 0
    assert weight.shape == (N,)
    if z is not None:
        assert z.shape == shape
    if group_size * x.element_size() > 65536:
        raise RuntimeError("This layer norm doesn't support feature dim >= 64KB.")
    CALLS.append(("rmsnorm_fn", dict(group_size=group_size, norm_before_gate=norm_before_gate, eps=eps,
                                     has_z=z is not None, has_bias=bias is not None)))
    v = x2.float()
    gate = None if z is None else F.silu(z.reshape(M, N).float())
    if gate is not None and not norm_before_gate:
        v = v * gate
    groups = v.view(M, N // group_size, group_size)
    out = (groups * torch.rsqrt(groups.square().mean(-1, keepdim=True) + eps)).view(M, N) * weight.float()
    if bias is not None:
        out = out + bias.float()
    if gate is not None and norm_before_gate:
        out = out * gate
    return out.to(x.dtype).view(shape)
