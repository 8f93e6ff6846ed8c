"""Mamba-2's gated RMSNorm (norm after gate), as transformers' MambaRMSNormGated
and mamba-ssm's ``rmsnorm_fn(..., norm_before_gate=False)`` compute it."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def gated_rmsnorm(y: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, group_size: int, eps: float,
                  out_dtype: torch.dtype) -> torch.Tensor:
    """y, z [T, D] -> rmsnorm(y * silu(z)) * weight, the mean of squares taken
    over each group of ``group_size`` channels; computed in float32."""
    T, D = y.shape
    if y.dtype == z.dtype == weight.dtype == torch.float32:
        # the arithmetic below in fewer calls (bitwise equal): a decode step's cost is mostly per call
        gated = y * F.silu(z)
        if group_size == D:
            return F.rms_norm(gated, (D,), weight, eps).to(out_dtype)
        return (F.rms_norm(gated.view(T, D // group_size, group_size), (group_size,), None, eps).view(T, D)
                * weight).to(out_dtype)
    gated = (y.float() * F.silu(z.float())).view(T, D // group_size, group_size)
    gated = gated * torch.rsqrt(gated.square().mean(-1, keepdim=True) + eps)
    return (gated.view(T, D) * weight.float()).to(out_dtype)
