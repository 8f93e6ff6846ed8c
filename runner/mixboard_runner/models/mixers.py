"""Mixer layers: thin holders of a layer's weights and stateless projections.

Each names its kind and spec (for the plan) and hands the part that touches
per-sequence state to whatever backend the plan chose, through the step's
``lookup(layer_name) -> (impl, state, meta)``. Parameter names follow the
Hugging Face checkpoints, so a state dict loads as is.
"""

from __future__ import annotations

import torch
from torch import nn

from mixboard import AttentionSpec, Mamba1Spec, Mamba1Weights, Mamba2Spec, Mamba2Weights, ShortConvSpec, ShortConvWeights

from .blocks import RMSNorm, Rotary
from .linear import fuse


class MixerLayer(nn.Module):
    kind: str

    def __init__(self, layer_name: str, spec):
        super().__init__()
        self.layer_name = layer_name
        self.spec = spec

    def finalize(self) -> None:
        """Called once after the weights are loaded (precompute what every step would redo)."""

    def forward(self, x, positions, step, rows=None):
        """[T, hidden] -> [T, hidden]; with ``rows``, just those rows of the
        output: the backend still sees every row, only the output projection
        runs on fewer (see model.Block)."""
        raise NotImplementedError


def _at(rows, out: torch.Tensor) -> torch.Tensor:
    return out if rows is None else out[rows]


class AttentionLayer(MixerLayer):
    kind = "attention"

    def __init__(self, layer_name: str, hidden: int, spec: AttentionSpec, rotary: Rotary | None, *,
                 bias: bool = False, out_name: str = "o_proj", qk_norm_eps: float | None = None):
        super().__init__(layer_name, spec)
        h, kv, d = spec.num_heads, spec.num_kv_heads, spec.head_size
        self.q_proj = nn.Linear(hidden, h * d, bias=bias)
        self.k_proj = nn.Linear(hidden, kv * d, bias=bias)
        self.v_proj = nn.Linear(hidden, kv * d, bias=bias)
        self.out_name = out_name
        setattr(self, out_name, nn.Linear(h * d, hidden, bias=bias))
        if qk_norm_eps is not None:  # LFM2 normalizes each head of q and k
            self.q_layernorm = RMSNorm(d, qk_norm_eps)
            self.k_layernorm = RMSNorm(d, qk_norm_eps)
        self.qk_norm = qk_norm_eps is not None
        self.rotary = rotary

    def finalize(self):
        # q, k and v read the same input: one product (see linear.py)
        self.qkv_proj = fuse(self.q_proj, self.k_proj, self.v_proj)
        del self.q_proj, self.k_proj, self.v_proj

    def forward(self, x, positions, step, rows=None):
        t, s, modules = x.shape[0], self.spec, self._modules  # see model.Block.forward
        h, kv, d = s.num_heads, s.num_kv_heads, s.head_size
        qkv = modules["qkv_proj"](x)
        v = qkv[:, (h + kv) * d:].view(t, kv, d)
        qk = qkv[:, :(h + kv) * d].view(t, h + kv, d)
        if self.qk_norm:  # in place: qkv is this layer's own
            modules["q_layernorm"].heads_(qk[:, :h])
            modules["k_layernorm"].heads_(qk[:, h:])
        rotary = modules.get("rotary")  # None: not a module, so not registered
        if rotary is not None:  # q and k side by side: one rotation
            qk = rotary(qk, positions, step)
        q, k = qk[:, :h], qk[:, h:]
        impl, state, meta = step.lookup(self.layer_name)
        out = impl.forward(q, k, v, state, meta)
        return modules[self.out_name](_at(rows, out.reshape(t, -1)))


class Mamba1Layer(MixerLayer):
    kind = "mamba1"

    def __init__(self, layer_name: str, hidden: int, spec: Mamba1Spec, *, bias: bool = False):
        super().__init__(layer_name, spec)
        d, n, r = spec.d_inner, spec.d_state, spec.dt_rank
        self.in_proj = nn.Linear(hidden, 2 * d, bias=bias)
        self.conv1d = nn.Conv1d(d, d, spec.d_conv, groups=d, bias=spec.conv_bias)
        self.x_proj = nn.Linear(d, r + 2 * n, bias=False)
        self.dt_proj = nn.Linear(r, d, bias=True)
        self.A_log = nn.Parameter(torch.zeros(d, n))
        self.D = nn.Parameter(torch.ones(d))
        self.out_proj = nn.Linear(d, hidden, bias=bias)
        self.weights: Mamba1Weights | None = None

    def finalize(self):
        self.weights = Mamba1Weights(
            conv_weight=self.conv1d.weight[:, 0].detach(), conv_bias=_detach(self.conv1d.bias),
            x_proj_weight=self.x_proj.weight.detach(), dt_proj_weight=self.dt_proj.weight.detach(),
            dt_proj_bias=self.dt_proj.bias.detach(), A=-torch.exp(self.A_log.detach().float()).to(self.A_log.dtype),
            D=self.D.detach(),
        )
        del self.x_proj, self.dt_proj  # the backend applies them, from the record: not the model's to pack

    def forward(self, x, positions, step, rows=None):
        modules = self._modules  # see model.Block.forward
        xz = modules["in_proj"](x)
        d = self.spec.d_inner
        impl, state, meta = step.lookup(self.layer_name)
        return modules["out_proj"](_at(rows, impl.forward(xz[:, :d], xz[:, d:], self.weights, state, meta)))


class Mamba2Layer(MixerLayer):
    kind = "mamba2"

    def __init__(self, layer_name: str, hidden: int, spec: Mamba2Spec, *, bias: bool = False):
        super().__init__(layer_name, spec)
        d, conv_dim, h = spec.d_inner, spec.conv_dim, spec.num_heads
        self.in_proj = nn.Linear(hidden, d + conv_dim + h, bias=bias)
        self.conv1d = nn.Conv1d(conv_dim, conv_dim, spec.d_conv, groups=conv_dim, bias=spec.conv_bias)
        self.dt_bias = nn.Parameter(torch.ones(h))
        self.A_log = nn.Parameter(torch.zeros(h))
        self.D = nn.Parameter(torch.ones(h))
        self.norm = RMSNorm(d, spec.norm_eps)
        self.out_proj = nn.Linear(d, hidden, bias=bias)
        self.weights: Mamba2Weights | None = None

    def finalize(self):
        self.weights = Mamba2Weights(
            conv_weight=self.conv1d.weight[:, 0].detach(), conv_bias=_detach(self.conv1d.bias),
            dt_bias=self.dt_bias.detach(), A=-torch.exp(self.A_log.detach().float()).to(self.A_log.dtype),
            D=self.D.detach(), norm_weight=self.norm.weight.detach(),
        )

    def forward(self, x, positions, step, rows=None):
        modules = self._modules  # see model.Block.forward
        proj = modules["in_proj"](x)
        s = self.spec
        z, xbc, dt = proj.split([s.d_inner, s.conv_dim, s.num_heads], dim=-1)
        impl, state, meta = step.lookup(self.layer_name)
        return modules["out_proj"](_at(rows, impl.forward(z, xbc, dt, self.weights, state, meta)))


class ShortConvLayer(MixerLayer):
    kind = "short_conv"

    def __init__(self, layer_name: str, hidden: int, spec: ShortConvSpec, *, bias: bool = False):
        super().__init__(layer_name, spec)
        self.in_proj = nn.Linear(hidden, 3 * hidden, bias=bias)
        self.conv = nn.Conv1d(hidden, hidden, spec.conv_width, groups=hidden, bias=spec.conv_bias)
        self.out_proj = nn.Linear(hidden, hidden, bias=bias)
        self.weights: ShortConvWeights | None = None

    def finalize(self):
        self.weights = ShortConvWeights(conv_weight=self.conv.weight[:, 0].detach(), conv_bias=_detach(self.conv.bias))

    def forward(self, x, positions, step, rows=None):
        modules = self._modules  # see model.Block.forward
        b, c, xx = modules["in_proj"](x).chunk(3, dim=-1)
        impl, state, meta = step.lookup(self.layer_name)
        return modules["out_proj"](_at(rows, impl.forward(b, c, xx, self.weights, state, meta)))


def _detach(t):
    return None if t is None else t.detach()
