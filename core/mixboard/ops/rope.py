"""The rotary embedding's frequencies, from a ``RotarySpec``: what every
rotary backend and the oracle share (the checkpoint's scaling rules)."""

from __future__ import annotations

import math

import torch


def inv_freq(spec) -> torch.Tensor:
    """float64 [rotary_dim / 2]: the angle per position of each channel pair."""
    dim = spec.dim
    freq = 1.0 / (spec.theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    scaling = spec.scaling_dict
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "linear":
        return freq / scaling["factor"]
    if kind == "llama3":  # long wavelengths slowed by factor, short ones kept, a smooth blend between
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old_len = scaling["original_max_position_embeddings"]
        wavelen = 2 * math.pi / freq
        smooth = (old_len / wavelen - low) / (high - low)
        scaled = torch.where(wavelen > old_len / low, freq / factor, freq)
        mid = (wavelen <= old_len / low) & (wavelen >= old_len / high)
        return torch.where(mid, (1 - smooth) * scaled / factor + smooth * scaled, scaled)
    return freq


def cos_sin(spec, length: int, dtype: torch.dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Tables [length, rotary_dim] for positions 0..length-1: cos, and sin with
    its first half negated, so that rotate_half(x) * sin == swap_halves(x) * signed_sin."""
    freqs = torch.outer(torch.arange(length, dtype=torch.float64), inv_freq(spec))
    cos = torch.cat([freqs, freqs], -1).cos()
    sin = torch.cat([-freqs, freqs], -1).sin()
    return cos.to(device, dtype), sin.to(device, dtype)
