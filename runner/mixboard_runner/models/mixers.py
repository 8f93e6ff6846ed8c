"""Mixer layers: thin holders of a layer's weights and its dense ops.

Each names its kind and spec (for the plan) and hands the part that touches
per-sequence state to whatever backend the plan chose, through the step's
``lookup(layer_name) -> (impl, state, meta)``. Its projections are ops
(``ops.py``), run by their own backends. Parameter names follow the
Hugging Face checkpoints, so a state dict loads as is.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mixboard import AttentionSpec, Mamba1Spec, Mamba1Weights, Mamba2Spec, Mamba2Weights, ShortConvSpec, ShortConvWeights

from .ops import FusedLinear, Linear, Params, RMSNorm, Rotary


class MixerLayer(nn.Module):
    kind: str

    def __init__(self, layer_name: str, spec):
        super().__init__()
        self.layer_name = layer_name
        self.spec = spec

    def finalize(self) -> None:
        """Called once after the weights are loaded (precompute what every step would redo)."""

    def forward(self, x, positions, step):
        """[T, hidden] -> [T, hidden]."""
        raise NotImplementedError


class AttentionLayer(MixerLayer):
    """q, k, v as one product, the kind, then o_proj. Options: ``qk_norm_eps``: an RMSNorm per head of q
    and k (``qk_norm``: its op class, and the checkpoint's names of the two); ``output_gate``: q_proj holds
    a gate per head after each head's queries (Qwen3-Next), and the output is multiplied by sigmoid(gate)
    before o_proj."""

    kind = "attention"

    def __init__(self, layer_name: str, hidden: int, spec: AttentionSpec, rotary: Rotary | None, *,
                 bias: bool = False, out_name: str = "o_proj", qk_norm_eps: float | None = None,
                 qk_norm: tuple = (RMSNorm, "q_layernorm", "k_layernorm"), output_gate: bool = False):
        super().__init__(layer_name, spec)
        h, kv, d, dtype = spec.num_heads, spec.num_kv_heads, spec.head_size, spec.dtype
        self.output_gate = output_gate
        self.q_proj = Params(hidden, (2 if output_gate else 1) * h * d, bias)
        self.k_proj = Params(hidden, kv * d, bias)
        self.v_proj = Params(hidden, kv * d, bias)
        self.qkv_proj = FusedLinear(f"{layer_name}.qkv_proj", (self.q_proj, self.k_proj, self.v_proj), dtype)
        self.o_proj = Linear(f"{layer_name}.{out_name}", h * d, hidden, dtype, bias)
        self.renames = {"o_proj": out_name}
        self.q_norm = self.k_norm = None
        if qk_norm_eps is not None:  # LFM2 and Qwen3-Next normalize each head of q and k
            norm, q_name, k_name = qk_norm
            self.q_norm = norm(f"{layer_name}.{q_name}", d, qk_norm_eps, dtype)
            self.k_norm = norm(f"{layer_name}.{k_name}", d, qk_norm_eps, dtype)
            self.renames.update(q_norm=q_name, k_norm=k_name)
        self.rotary = rotary

    @torch.no_grad()
    def finalize(self):
        if self.output_gate:  # per head [queries, gate] -> [every head's queries, every head's gate]: slices
            s, q = self.spec, self.q_proj
            for t in (q.weight, q.bias):
                if t is not None:
                    t.copy_(t.view(s.num_heads, 2, -1).transpose(0, 1).reshape(t.shape))

    def forward(self, x, positions, step):
        t, s = x.shape[0], self.spec
        h, kv, d = s.num_heads, s.num_kv_heads, s.head_size
        qkv = self.qkv_proj(x)
        q = qkv[:, :h * d].view(t, h, d)
        if self.output_gate:
            gate, qkv = qkv[:, h * d:2 * h * d], qkv[:, h * d:]
        k = qkv[:, h * d:(h + kv) * d].view(t, kv, d)
        v = qkv[:, (h + kv) * d:].view(t, kv, d)
        if self.q_norm is not None:
            q, k = self.q_norm(q, None)[0], self.k_norm(k, None)[0]
        if self.rotary is not None:
            q, k = self.rotary(positions, q, k)
        impl, state, meta = step.lookup(self.layer_name)
        out = impl.forward(q, k, v, state, meta).reshape(t, -1)
        return self.o_proj(out * torch.sigmoid(gate) if self.output_gate else out)


class Mamba1Layer(MixerLayer):
    kind = "mamba1"

    def __init__(self, layer_name: str, hidden: int, spec: Mamba1Spec, *, bias: bool = False):
        super().__init__(layer_name, spec)
        d, n, r = spec.d_inner, spec.d_state, spec.dt_rank
        self.in_proj = Linear(f"{layer_name}.in_proj", hidden, 2 * d, spec.dtype, bias)
        self.conv1d = nn.Conv1d(d, d, spec.d_conv, groups=d, bias=spec.conv_bias)
        self.x_proj = nn.Linear(d, r + 2 * n, bias=False)
        self.dt_proj = nn.Linear(r, d, bias=True)
        self.A_log = nn.Parameter(torch.zeros(d, n))
        self.D = nn.Parameter(torch.ones(d))
        if spec.dt_bc_norms:  # Jamba's: dt, B and C normalized after x_proj, inside the kind
            self.dt_layernorm = GatedNormWeight(r)
            self.b_layernorm, self.c_layernorm = GatedNormWeight(n), GatedNormWeight(n)
        self.out_proj = Linear(f"{layer_name}.out_proj", d, hidden, spec.dtype, bias)
        self.weights: Mamba1Weights | None = None

    def finalize(self):
        self.weights = Mamba1Weights(
            conv_weight=self.conv1d.weight[:, 0].detach(), conv_bias=_detach(self.conv1d.bias),
            x_proj_weight=self.x_proj.weight.detach(), dt_proj_weight=self.dt_proj.weight.detach(),
            dt_proj_bias=self.dt_proj.bias.detach(),
            A=-torch.exp(self.A_log.detach().float()),  # float32 whatever the layer's dtype, as transformers has it
            D=self.D.detach(),
            **({f"{part}_norm_weight": getattr(self, f"{part}_layernorm").weight.detach() for part in ("dt", "b", "c")}
               if self.spec.dt_bc_norms else {}),
        )

    def forward(self, x, positions, step):
        xz = self.in_proj(x)
        d = self.spec.d_inner
        impl, state, meta = step.lookup(self.layer_name)
        return self.out_proj(impl.forward(xz[:, :d], xz[:, d:], self.weights, state, meta))


class Mamba2Layer(MixerLayer):
    """With ``spec.gated_norm`` False the layer has no norm (Falcon-H1 without ``mamba_rms_norm``):
    the backend returns y before the gate, and the layer gates it, y * silu(z)."""

    kind = "mamba2"

    def __init__(self, layer_name: str, hidden: int, spec: Mamba2Spec, *, bias: bool = False,
                 out_bias: bool | None = None):
        super().__init__(layer_name, spec)
        d, conv_dim, h = spec.d_inner, spec.conv_dim, spec.num_heads
        out_bias = bias if out_bias is None else out_bias
        self.in_proj = Linear(f"{layer_name}.in_proj", hidden, d + conv_dim + h, spec.dtype, bias)
        self.conv1d = nn.Conv1d(conv_dim, conv_dim, spec.d_conv, groups=conv_dim, bias=spec.conv_bias)
        self.dt_bias = nn.Parameter(torch.ones(h))
        self.A_log = nn.Parameter(torch.zeros(h))
        self.D = nn.Parameter(torch.ones(h))
        self.norm = GatedNormWeight(d) if spec.gated_norm else None
        self.out_proj = Linear(f"{layer_name}.out_proj", d, hidden, spec.dtype, out_bias)
        self.weights: Mamba2Weights | None = None

    def finalize(self):
        self.weights = Mamba2Weights(
            conv_weight=self.conv1d.weight[:, 0].detach(), conv_bias=_detach(self.conv1d.bias),
            dt_bias=self.dt_bias.detach(),
            A=-torch.exp(self.A_log.detach().float()),  # float32 whatever the layer's dtype, as transformers has it
            D=self.D.detach(), norm_weight=None if self.norm is None else self.norm.weight.detach(),
        )

    def forward(self, x, positions, step):
        proj = self.in_proj(x)
        s = self.spec
        z, xbc, dt = proj.split([s.d_inner, s.conv_dim, s.num_heads], dim=-1)
        impl, state, meta = step.lookup(self.layer_name)
        y = impl.forward(z, xbc, dt, self.weights, state, meta)
        if not s.gated_norm:
            y = y * F.silu(z)
        return self.out_proj(y)


class ShortConvLayer(MixerLayer):
    kind = "short_conv"

    def __init__(self, layer_name: str, hidden: int, spec: ShortConvSpec, *, bias: bool = False):
        super().__init__(layer_name, spec)
        self.in_proj = Linear(f"{layer_name}.in_proj", hidden, 3 * hidden, spec.dtype, bias)
        self.conv = nn.Conv1d(hidden, hidden, spec.conv_width, groups=hidden, bias=spec.conv_bias)
        self.out_proj = Linear(f"{layer_name}.out_proj", hidden, hidden, spec.dtype, bias)
        self.weights: ShortConvWeights | None = None

    def finalize(self):
        self.weights = ShortConvWeights(conv_weight=self.conv.weight[:, 0].detach(), conv_bias=_detach(self.conv.bias))

    def forward(self, x, positions, step):
        b, c, xx = self.in_proj(x).chunk(3, dim=-1)
        impl, state, meta = step.lookup(self.layer_name)
        return self.out_proj(impl.forward(b, c, xx, self.weights, state, meta))


class GatedNormWeight(nn.Module):
    """A norm's weight inside a mixer kind (Mamba-2's gated norm, Jamba's dt/B/C norms): part of the
    kind, not an op of its own."""

    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))


def _detach(t):
    return None if t is None else t.detach()
