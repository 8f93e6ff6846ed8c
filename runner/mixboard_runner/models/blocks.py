"""The stateless blocks every architecture is assembled from."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .. import kernels
from . import panels
from .linear import fuse


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    kernel_weight: torch.Tensor | None = None  # the weight, where the kernels serve it (set by finalize)

    @property
    def native(self) -> bool:
        """Whether the norm runs on the runner's kernels (CPU, float32)."""
        return self.kernel_weight is not None

    def finalize(self) -> None:
        """On CPU in float32 the norm is one kernel call (kernels.rms_norm) instead of F.rms_norm's operators.
        The kernels read the weight from a plain attribute: ``self.weight`` goes through nn.Module's
        ``__getattr__``, a Python call (~0.9 us; 28 a step of lfm2)."""
        if kernels.serves(self.weight.device, self.weight.dtype):
            self.weight = nn.Parameter(self.weight.detach().contiguous(), requires_grad=False)
            self.kernel_weight = self.weight.detach()

    def add_norm(self, x: torch.Tensor, delta: torch.Tensor | None, fp32: bool = False):
        """(norm(x + delta), x + delta): a residual add and the norm after it (x alone when delta is
        None; x in float32 first with ``fp32``). ``delta`` is the caller's own tensor: where the kernel
        serves, the sum is written into it, in the same pass as the norm (kernels.add_rms_norm)."""
        if delta is not None:
            w = self.kernel_weight
            if (w is not None and x.dtype == delta.dtype == torch.float32 and x.dim() == delta.dim() == 2
                    and x.shape == delta.shape and x.stride(1) == delta.stride(1) == 1):
                return kernels.add_rms_norm(delta, x, w, self.eps), delta
            x = x.float() + delta if fp32 else x + delta
        return self(_as(x, self.weight.dtype)), x

    def heads_(self, x: torch.Tensor) -> torch.Tensor:
        """x [T, heads, D], each head normalized in place (LFM2's q and k norms inside the fused
        qkv product's output); returns x."""
        w = self.kernel_weight
        if w is not None and x.dtype == torch.float32 and x.stride(2) == 1 and x.stride(1) == x.shape[2]:
            kernels.rms_norm_heads_(x, w, self.eps)
            return x
        return x.copy_(self(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.kernel_weight
        if w is not None and x.dtype == torch.float32:
            return kernels.rms_norm(x, w, self.eps)
        if x.dtype == torch.float32 and self.weight.dtype == torch.float32:
            # the same arithmetic as below in one call (bitwise equal in float32)
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        # float32 statistics whatever the model dtype, as the reference implementations do
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


class GatedMLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x)). ``names`` maps (gate, up, down) to
    the checkpoint's module names (llama: gate_proj/up_proj/down_proj, LFM2: w1/w3/w2)."""

    def __init__(self, hidden: int, intermediate: int, names=("gate_proj", "up_proj", "down_proj"), bias=False):
        super().__init__()
        self.names = names
        for name, (i, o) in zip(names, ((hidden, intermediate), (hidden, intermediate), (intermediate, hidden))):
            setattr(self, name, nn.Linear(i, o, bias=bias))

    def finalize(self) -> None:
        """gate and up read the same input: one product (see linear.py); on
        panels the product applies the gate too (panels.PanelLinear.gated)."""
        gate, up = getattr(self, self.names[0]), getattr(self, self.names[1])
        self.gated = panels.serves(gate.weight.device, gate.weight.dtype)
        self.gate_up = panels.PanelLinear.gated(gate, up) if self.gated else fuse(gate, up)
        delattr(self, self.names[0])
        delattr(self, self.names[1])

    gated = False  # set by finalize()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        modules = self._modules  # not self.gate_up: see model.Block.forward
        if self.gated:
            return modules[self.names[2]](modules["gate_up"](x))
        gate, up = modules["gate_up"](x).chunk(2, dim=-1)
        return modules[self.names[2]](F.silu(gate) * up)


class Rotary(nn.Module):
    """Rotary position embedding (rotate-half convention) on the first
    ``rotary_dim`` channels of each head. The cos/sin table is computed on
    first use and grows on demand (so a model built on the meta device needs
    nothing from the checkpoint for it). One Rotary serves every layer of a
    model: the rows of a step's positions are looked up once per step."""

    def __init__(self, head_size: int, theta: float, rotary_dim: int | None = None, scaling: dict | None = None):
        super().__init__()
        self.rotary_dim = rotary_dim or head_size
        self.theta, self.scaling = theta, scaling
        self._cos = self._sin = None

    def _table(self, length: int, device, dtype):
        if self._cos is None or self._cos.shape[0] < length or self._cos.device != device or self._cos.dtype != dtype:
            size = max(length, 2 * (0 if self._cos is None else self._cos.shape[0]), 256)
            exponents = torch.arange(0, self.rotary_dim, 2, dtype=torch.float64, device="cpu") / self.rotary_dim
            inv_freq = 1.0 / (self.theta ** exponents)
            if self.scaling:
                inv_freq = _scaled(inv_freq, self.scaling)
            freqs = torch.outer(torch.arange(size, dtype=torch.float64, device="cpu"), inv_freq)
            # rotate_half(x) * sin == swap_halves(x) * (sin with its first half negated)
            self._cos = torch.cat([freqs, freqs], -1).cos().to(device, dtype)
            self._sin = torch.cat([-freqs, freqs], -1).sin().to(device, dtype)
        return self._cos, self._sin

    def rows(self, positions: torch.Tensor, step, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and signed sin at the step's positions, [T, 1, rotary_dim], once per step."""
        memo = step.memo.get(self)
        if memo is None:
            cos, sin = self._table(step.max_position + 1, like.device, like.dtype)
            memo = step.memo[self] = (cos[positions].unsqueeze(1), sin[positions].unsqueeze(1))
        return memo

    def forward(self, x: torch.Tensor, positions: torch.Tensor, step) -> torch.Tensor:
        """x: [T, heads, D] (q, k, or both side by side) -> x rotated: x itself, rotated in place, where
        the runner's kernel serves (float32 CPU; callers pass a tensor of their own), else a new tensor."""
        if kernels.serves(x.device, x.dtype) and x.stride(-1) == 1 and positions.dtype == torch.int64:
            cos, sin = self._table(step.max_position + 1, x.device, x.dtype)
            kernels.rotary(x, positions, cos, sin)
            return x
        cos, sin = self.rows(positions, step, x)
        dim = self.rotary_dim
        if dim == x.shape[-1]:
            return _rotate(x, cos, sin)
        return torch.cat([_rotate(x[..., :dim], cos, sin), x[..., dim:]], -1)


def _as(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    # the residual stream is mostly in the norm's dtype already: skip the no-op .to() dispatch
    return x if x.dtype == dtype else x.to(dtype)


def _rotate(x, cos, sin):
    t, h, d = x.shape
    swapped = x.reshape(t, h, 2, d // 2).flip(2).view(t, h, d)
    return torch.addcmul(x * cos, swapped, sin)


def _scaled(inv_freq: torch.Tensor, scaling: dict) -> torch.Tensor:
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return inv_freq
    if kind == "linear":
        return inv_freq / scaling["factor"]
    if kind == "llama3":
        import math

        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old_len = scaling["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv_freq
        smooth = (old_len / wavelen - low) / (high - low)
        scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
        mid = (wavelen <= old_len / low) & (wavelen >= old_len / high)
        return torch.where(mid, (1 - smooth) * scaled / factor + smooth * scaled, scaled)
    raise ValueError(f"rope scaling type {kind!r} is not supported (supported: default, linear, llama3)")
