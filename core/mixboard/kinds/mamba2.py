"""Kind ``mamba2``: Mamba-2's state space duality (SSD) with conv and gated norm.

Boundary: the backend receives the in_proj output split as z, xBC and dt,
plus conv, dt_bias, A, D and gated-norm weights, and returns y before
``out_proj`` (with ``gated_norm=False``, y before the gate and the norm,
which the caller then applies: an engine whose norm spans tensor-parallel
ranks, or a layer without one):

    xBC = silu(causal_conv1d(xBC))              (conv state carried)
    x, B, C = split(xBC, [d_inner, n_groups * d_state, n_groups * d_state])
    dt  = clamp(softplus(dt + dt_bias), dt_min, dt_max)      # per head
    h   = exp(dt * A) * h + dt * x (outer) B    # per head [head_dim, d_state]; B, C shared by a group of heads
    y   = h @ C + D * x
    y   = rmsnorm(y * silu(z)) * norm_weight    # over groups of d_inner / n_groups channels; gated_norm only
"""

from __future__ import annotations

import math
from abc import abstractmethod
from typing import TYPE_CHECKING, Any, Mapping

from ..state import StateSpec
from .base import ConvAndSsmStates, Kind, MixerImpl, MixerSpec, Record, require, spec_class

if TYPE_CHECKING:
    from torch import Tensor


@spec_class
class Mamba2Spec(ConvAndSsmStates, MixerSpec):
    """num_heads: 32. head_dim: 64 (d_inner = num_heads * head_dim).
    d_state: 128. n_groups: 1 (B and C are shared by num_heads / n_groups
    heads). d_conv: 4. chunk_size: 256 (the SSD chunk; a hint, results do
    not depend on it). conv_bias: True. norm_eps: 1e-5. dt_min, dt_max: the
    clamp on dt after softplus (0, inf). state_dtype: the states' dtype
    (None means dtype). conv_state_dtype: the conv state's alone, where it
    differs from the SSM state's (None means state_dtype or dtype; vLLM on
    a CPU with AVX512-BF16 keeps a bfloat16 layer's conv state in bfloat16,
    its SSM state in float32). gated_norm: True: the backend applies the
    gate and the RMSNorm (``y * silu(z)``, then the norm) and returns their
    output. False: it
    returns y = S @ C + D * x, before both; z still arrives and is ignored,
    ``weights.norm_weight`` may be None and is not read, and norm_eps means
    nothing. The caller applies them (an engine whose norm group spans
    tensor-parallel ranks reduces its variance across them)."""

    num_heads: int = 32
    head_dim: int = 64
    d_state: int = 128
    n_groups: int = 1
    d_conv: int = 4
    chunk_size: int = 256
    conv_bias: bool = True
    norm_eps: float = 1e-5
    dt_min: float = 0.0
    dt_max: float = math.inf
    state_dtype: str | None = None
    conv_state_dtype: str | None = None
    gated_norm: bool = True

    def validate(self) -> None:
        require(min(self.num_heads, self.head_dim, self.d_state, self.n_groups, self.chunk_size) > 0,
                "num_heads, head_dim, d_state, n_groups and chunk_size must be positive")
        require(self.num_heads % self.n_groups == 0,
                f"num_heads ({self.num_heads}) must be a multiple of n_groups ({self.n_groups})")
        require(self.d_conv >= 2, "d_conv (the conv width) must be at least 2")
        require(0.0 <= self.dt_min <= self.dt_max, "need 0 <= dt_min <= dt_max")

    def canonical(self) -> dict[str, Any]:
        """Without the gated norm, norm_eps means nothing: every value of it is one spec (None); the
        state dtypes as they follow from each other."""
        values = self.to_dict()
        if not self.gated_norm:
            values["norm_eps"] = None
        values["state_dtype"], values["conv_state_dtype"] = self.ssm_dtype, self.conv_dtype
        return values

    @property
    def d_inner(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        return self.d_inner + 2 * self.n_groups * self.d_state


class Mamba2Weights(Record):
    """The layer's weights the backend needs (tensors):

    conv_weight: [conv_dim, d_conv]
    conv_bias: [conv_dim] or None
    dt_bias: [num_heads]
    A: [num_heads], negative: -exp(A_log), computed once at load; float32 whatever the layer's dtype
       (as the runner and vLLM hand it: rounding A to bfloat16 moves every step's decay)
    D: [num_heads]
    norm_weight: [d_inner]; may be None where the spec has gated_norm=False
    """

    __slots__ = ('conv_weight', 'conv_bias', 'dt_bias', 'A', 'D', 'norm_weight')


class Mamba2Impl(MixerImpl):
    """The impl interface of kind ``mamba2``: ``forward(z, xBC, dt, weights, state, meta)``.

    The rules every kind shares (lifecycle, strides of inputs and pools,
    what may change) are ``help(mixboard.kinds.MixerImpl)``; the step's
    rows, slots and fresh sequences are
    ``help(mixboard.CommonBatchMetadata)``. H = num_heads, P = head_dim,
    N = d_state, G = n_groups, W = d_conv, DI = d_inner = H * P,
    CD = conv_dim = DI + 2 * G * N, T = num_tokens.

    z: [T, DI]. The gate, from in_proj (ignored with ``gated_norm=False``).
    xBC: [T, CD]. The conv's input, from in_proj: after the conv, channels
        0..DI-1 are x (head h is channels h*P..h*P+P-1), then B as [G, N],
        then C as [G, N].
    dt: [T, H]. The raw time step per head, from in_proj.
    weights: ``Mamba2Weights`` (``help(Mamba2Weights)``): conv_weight
        [CD, W], conv_bias [CD] or None, dt_bias [H], A [H] (already
        -exp(A_log): negative), D [H], norm_weight [DI] (with
        ``gated_norm=False`` it may be None, and must not be read).
    state (canonical, 'slots'):
        ``conv`` [num_slots, CD, W - 1], in ``conv_state_dtype or
        state_dtype or dtype``: the sequence's last W - 1 conv inputs (raw
        xBC, before the conv), oldest first: column -1 is the newest; a
        sequence that has seen fewer keeps zeros in the oldest.
        ``ssm`` [num_slots, H, P, N], in ``state_dtype or dtype``: the
        state S after the last token.
        In both pools each slot's record is contiguous; slots are
        ``stride(0)`` apart, which may exceed a record.
    meta: the builder's output for the step.
    Returns: y [T, DI], before ``out_proj``, in the dtype of xBC; with
        ``gated_norm=False``, before the gate and the norm as well.

    What it computes, per sequence i, starting from zeros if context_lens[i]
    is 0, else from the records at slot state_slots[i]; token by token:

        xBC = silu(conv(xBC))     conv[t, c] = conv_bias[c] + sum_k
                                  conv_weight[c, k] * xBC[t - (W - 1) + k, c],
                                  inputs before the step from the conv state
        x, B, C = split(xBC, [DI, G * N, G * N])
        dt = clamp(softplus(dt + dt_bias), dt_min, dt_max)        # [H]
        for head h, of group g = h // (H // G):
            S[h] = exp(dt[h] * A[h]) * S[h] + dt[h] * outer(x[h], B[g])   # [P, N]
            y[h] = S[h] @ C[g] + D[h] * x[h]
        if gated_norm:            # else y is returned here: z, norm_weight, norm_eps unused
            y = y * silu(z)                                       # [DI]
            y = y / sqrt(mean(y ** 2) + norm_eps) * norm_weight   # mean over each
                                  group of DI / G consecutive channels

    softplus is log(1 + exp(.)) without a linear cut-off. ``chunk_size`` is
    a hint for chunked scans; the result must not depend on it. Afterwards
    the sequence's slot holds its new conv state and S. A decode-only fast
    path must give the same numbers.
    The oracle, ``mixboard.testing.Mamba2Oracle``, is the definition.
    """

    @abstractmethod
    def forward(self, z: "Tensor", xBC: "Tensor", dt: "Tensor", weights: Mamba2Weights,
                state: Mapping[str, "Tensor"], meta: Any) -> "Tensor":
        """Conv, SSD scan and (with gated_norm) gated norm, states carried in slots; return y [T, d_inner] (see the
        class docstring)."""


def mamba2_state(spec: Mamba2Spec) -> StateSpec:
    return StateSpec.slots(
        conv=((spec.conv_dim, spec.d_conv - 1), spec.conv_dtype),
        ssm=((spec.num_heads, spec.head_dim, spec.d_state), spec.ssm_dtype),
    )


MAMBA2 = Kind(
    name="mamba2",
    spec=Mamba2Spec,
    impl=Mamba2Impl,
    state_spec=mamba2_state,
    description="Mamba-2 SSD scan with causal conv and gated RMSNorm",
    install_hint="pip install mixboard-mamba2",
    conformance="mixboard.testing.conformance.kinds:MAMBA2",
    row_inputs={"forward": 3},
)
