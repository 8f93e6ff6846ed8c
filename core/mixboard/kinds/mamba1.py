"""Kind ``mamba1``: Mamba's selective scan (S6) with its causal conv.

Boundary: the backend receives x and z (the two halves of ``in_proj``'s
output) plus the layer's conv, x_proj, dt_proj, A and D weights, and returns
y before ``out_proj``:

    x  = silu(causal_conv1d(x))                 (conv state carried)
    dt, B, C = split(x @ x_proj_weight.T, [dt_rank, d_state, d_state])
    dt, B, C = rms(dt) * dt_norm_weight, rms(B) * b_norm_weight, rms(C) * c_norm_weight
                                                (only with dt_bc_norms: Jamba)
    dt = softplus(dt @ dt_proj_weight.T + dt_proj_bias)
    h  = exp(dt * A) * h + dt * B * x           (per channel, per state; ssm state carried)
    y  = (h @ C + D * x) * silu(z)
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, Any, Mapping

from ..state import StateSpec
from .base import ConvAndSsmStates, Kind, MixerImpl, MixerSpec, Record, require, spec_class

if TYPE_CHECKING:
    from torch import Tensor


@spec_class
class Mamba1Spec(ConvAndSsmStates, MixerSpec):
    """d_inner: channels after in_proj (default 1536). d_state: 16.
    d_conv: conv width (4). dt_rank: 48. conv_bias: True.
    state_dtype: the states' dtype (None means dtype).
    conv_state_dtype: the conv state's alone, where it differs from the SSM
    state's (None means state_dtype or dtype; vLLM on a CPU with AVX512-BF16
    keeps a bfloat16 layer's conv state in bfloat16, its SSM state in
    float32).
    dt_bc_norms: RMS-normalize dt (before dt_proj), B and C after x_proj's
    split, each over its own width with its own weight (Jamba); norm_eps is
    their epsilon (meaningless, and canonical at its default, without them)."""

    d_inner: int = 1536
    d_state: int = 16
    d_conv: int = 4
    dt_rank: int = 48
    conv_bias: bool = True
    state_dtype: str | None = None
    conv_state_dtype: str | None = None
    dt_bc_norms: bool = False
    norm_eps: float = 1e-6

    def validate(self) -> None:
        require(min(self.d_inner, self.d_state, self.dt_rank) > 0, "d_inner, d_state and dt_rank must be positive")
        require(self.d_conv >= 2, "d_conv (the conv width) must be at least 2")
        require(self.norm_eps > 0, "norm_eps must be positive")

    def canonical(self) -> dict[str, Any]:
        out = self.to_dict()
        if not self.dt_bc_norms:
            out["norm_eps"] = 1e-6  # unused without the norms: specs that differ only there mean the same
        out["state_dtype"], out["conv_state_dtype"] = self.ssm_dtype, self.conv_dtype  # as they follow
        return out


class Mamba1Weights(Record):
    """The layer's weights the backend needs (tensors):

    conv_weight: [d_inner, d_conv]
    conv_bias: [d_inner] or None
    x_proj_weight: [dt_rank + 2 * d_state, d_inner]
    dt_proj_weight: [d_inner, dt_rank]
    dt_proj_bias: [d_inner]
    A: [d_inner, d_state], negative: -exp(A_log), computed once at load; float32 whatever the layer's
       dtype (as the runner and vLLM hand it: rounding A to bfloat16 moves every step's decay)
    D: [d_inner]
    dt_norm_weight: [dt_rank], b_norm_weight, c_norm_weight: [d_state];
        tensors with dt_bc_norms, else None (may be left out)
    """

    __slots__ = ('conv_weight', 'conv_bias', 'x_proj_weight', 'dt_proj_weight', 'dt_proj_bias', 'A', 'D',
                 'dt_norm_weight', 'b_norm_weight', 'c_norm_weight')
    optional = ('dt_norm_weight', 'b_norm_weight', 'c_norm_weight')


class Mamba1Impl(MixerImpl):
    """The impl interface of kind ``mamba1``: ``forward(x, z, weights, state, meta)``.

    The rules every kind shares (lifecycle, strides of inputs and pools,
    what may change) are ``help(mixboard.kinds.MixerImpl)``; the step's
    rows, slots and fresh sequences are
    ``help(mixboard.CommonBatchMetadata)``. DI = d_inner, N = d_state,
    R = dt_rank, W = d_conv, T = num_tokens.

    x: [T, DI]. The first half of in_proj's output (the conv's input).
    z: [T, DI]. The second half (the gate).
    weights: ``Mamba1Weights`` (``help(Mamba1Weights)``): conv_weight
        [DI, W], conv_bias [DI] or None, x_proj_weight [R + 2N, DI],
        dt_proj_weight [DI, R], dt_proj_bias [DI], A [DI, N] (already
        -exp(A_log): negative), D [DI]; with ``dt_bc_norms``
        dt_norm_weight [R], b_norm_weight [N], c_norm_weight [N], else None.
    state (canonical, 'slots'):
        ``conv`` [num_slots, DI, W - 1], in ``conv_state_dtype or
        state_dtype or dtype``: the sequence's last W - 1 conv inputs (raw
        x, before the conv), oldest first: column -1 is the newest; a
        sequence that has seen fewer keeps zeros in the oldest.
        ``ssm`` [num_slots, DI, N], in ``state_dtype or dtype``: the scan
        state h after the sequence's last token. In both pools each slot's
        record is contiguous; slots are ``stride(0)`` apart, which may
        exceed a record.
    meta: the builder's output for the step.
    Returns: y [T, DI], before ``out_proj``.

    What it computes, per sequence i, starting from zeros if context_lens[i]
    is 0, else from the records at slot state_slots[i]; token by token:

        xc = silu(conv(x))        conv[t, c] = conv_bias[c] + sum_k
                                  conv_weight[c, k] * x[t - (W - 1) + k, c],
                                  inputs before the step from the conv state
        dt, B, C = split(xc @ x_proj_weight.T, [R, N, N])
        if dt_bc_norms:   rms(v) = v / sqrt(mean(v ** 2) + norm_eps)
            dt, B, C = rms(dt) * dt_norm_weight, rms(B) * b_norm_weight, rms(C) * c_norm_weight
        dt = softplus(dt @ dt_proj_weight.T + dt_proj_bias)       # [DI]
        h  = exp(dt[:, None] * A) * h + (dt * xc)[:, None] * B    # [DI, N]
        y  = (h @ C + D * xc) * silu(z)

    softplus is log(1 + exp(.)) without a linear cut-off. Afterwards the
    sequence's slot holds its new conv state and h. Decodes are sequences
    with one new token; a decode-only fast path must give the same numbers.
    The oracle, ``mixboard.testing.Mamba1Oracle``, is the definition.
    """

    @abstractmethod
    def forward(self, x: "Tensor", z: "Tensor", weights: Mamba1Weights, state: Mapping[str, "Tensor"], meta: Any) -> "Tensor":
        """Conv, selective scan and gate, states carried in slots; return y [T, d_inner] (see the class docstring)."""


def mamba1_state(spec: Mamba1Spec) -> StateSpec:
    return StateSpec.slots(conv=((spec.d_inner, spec.d_conv - 1), spec.conv_dtype),
                           ssm=((spec.d_inner, spec.d_state), spec.ssm_dtype))


MAMBA1 = Kind(
    name="mamba1",
    spec=Mamba1Spec,
    impl=Mamba1Impl,
    state_spec=mamba1_state,
    description="Mamba selective scan (S6) with causal conv",
    install_hint="pip install mixboard-mamba1",
    conformance="mixboard.testing.conformance.kinds:MAMBA1",
    row_inputs={"forward": 2},
)
