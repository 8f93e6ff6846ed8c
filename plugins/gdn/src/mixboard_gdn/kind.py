"""Kind ``gated_delta_net``: Gated DeltaNet, a linear attention whose state follows the delta rule.

Boundary (as Qwen3-Next's layer runs it): the backend receives the in_proj
outputs q/k/v packed before the conv, the gate z, and the raw b and a per
value head, plus conv, dt_bias, A and norm weights, and returns the output
before ``out_proj`` (with ``gated_norm=False``, before the norm and the gate,
which the caller then applies):

    qkv  = silu(causal_conv1d(qkv))                   (conv state carried)
    q, k, v = split(qkv, [Hk * Dk, Hk * Dk, Hv * Dv])
    q, k = l2norm(q), l2norm(k)  (per head; qk_l2norm);  q = q / sqrt(Dk)
    beta = sigmoid(b);  g = A * softplus(a + dt_bias)  # per value head; A < 0, so g <= 0
    S    = exp(g) * S;  S = S + outer(k, beta * (v - S^T k))   # S [Dk, Dv] per value head
    o    = S^T q
    o    = rmsnorm(o) * norm_weight * silu(z)          # per value head, over Dv; gated_norm only
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, Any, Mapping

from mixboard import StateSpec
from mixboard.dtypes import DTYPES
from mixboard.kinds import Kind, MixerImpl, MixerSpec, Record, require, spec_class

if TYPE_CHECKING:
    from torch import Tensor


@spec_class
class GatedDeltaNetSpec(MixerSpec):
    """num_k_heads: 16 (query and key heads). num_v_heads: 32 (value heads, a multiple of num_k_heads: each
    query/key head serves num_v_heads / num_k_heads consecutive value heads). head_k_dim: 128. head_v_dim:
    128. d_conv: 4. conv_bias: False. chunk_size: 64 (a hint for chunked prefills; results do not depend on
    it). qk_l2norm: True (q and k are L2-normalised per head, eps 1e-6, as fla's use_qk_l2norm_in_kernel).
    norm_eps: 1e-6. state_dtype: the recurrent state's dtype, conv_state_dtype: the conv state's; None means
    dtype (vLLM keeps a bfloat16 model's recurrent state in float32 and its conv state in bfloat16).
    gated_norm: True: the backend applies the per-head
    RMSNorm and the gate and returns their output. False: it returns o = S^T q before both; z arrives and is
    ignored, ``weights.norm_weight`` may be None and is not read, norm_eps means nothing."""

    num_k_heads: int = 16
    num_v_heads: int = 32
    head_k_dim: int = 128
    head_v_dim: int = 128
    d_conv: int = 4
    conv_bias: bool = False
    chunk_size: int = 64
    qk_l2norm: bool = True
    norm_eps: float = 1e-6
    state_dtype: str | None = None
    conv_state_dtype: str | None = None
    gated_norm: bool = True

    def validate(self) -> None:
        require(min(self.num_k_heads, self.num_v_heads, self.head_k_dim, self.head_v_dim, self.chunk_size) > 0,
                "num_k_heads, num_v_heads, head_k_dim, head_v_dim and chunk_size must be positive")
        require(self.num_v_heads % self.num_k_heads == 0,
                f"num_v_heads ({self.num_v_heads}) must be a multiple of num_k_heads ({self.num_k_heads})")
        require(self.d_conv >= 2, "d_conv (the conv width) must be at least 2")
        require(self.conv_state_dtype is None or self.conv_state_dtype in DTYPES,
                f"conv_state_dtype must be one of {', '.join(DTYPES)} or none, not {self.conv_state_dtype!r}")

    def canonical(self) -> dict[str, Any]:
        """Without the gated norm, norm_eps means nothing: every value of it is one spec (None)."""
        values = self.to_dict()
        if not self.gated_norm:
            values["norm_eps"] = None
        return values

    @property
    def key_dim(self) -> int:
        return self.num_k_heads * self.head_k_dim

    @property
    def value_dim(self) -> int:
        return self.num_v_heads * self.head_v_dim

    @property
    def conv_dim(self) -> int:
        return 2 * self.key_dim + self.value_dim


class GatedDeltaNetWeights(Record):
    """The layer's weights the backend needs (tensors):

    conv_weight: [conv_dim, d_conv]
    conv_bias: [conv_dim] or None
    dt_bias: [num_v_heads]
    A: [num_v_heads], negative: -exp(A_log), computed once at load; any float dtype (keep it float32: the
       decay is computed in float32, and rounding A to bfloat16 moves every step's decay)
    norm_weight: [head_v_dim], shared by every value head; may be None where the spec has gated_norm=False
    """

    __slots__ = ("conv_weight", "conv_bias", "dt_bias", "A", "norm_weight")


class GatedDeltaNetImpl(MixerImpl):
    """The impl interface of kind ``gated_delta_net``: ``forward(qkv, z, b, a, weights, state, meta)``.

    The rules every kind shares (lifecycle, strides, what may change) are
    ``help(mixboard.kinds.MixerImpl)``. Hk = num_k_heads, Hv = num_v_heads,
    Dk = head_k_dim, Dv = head_v_dim, R = Hv / Hk, W = d_conv,
    CD = conv_dim = 2 * Hk * Dk + Hv * Dv, T = num_tokens.

    qkv: [T, CD]. The conv's input from in_proj: after the conv, channels
        0..Hk*Dk-1 are q (head j is channels j*Dk..j*Dk+Dk-1), then k alike,
        then v as [Hv, Dv].
    z: [T, Hv * Dv]. The gate (ignored with ``gated_norm=False``).
    b: [T, Hv]. beta before its sigmoid.  a: [T, Hv]. The raw time step.
    weights: ``GatedDeltaNetWeights``.
    state (canonical, 'slots'):
        ``conv`` [num_slots, CD, W - 1], in ``conv_state_dtype or dtype``:
        the last W - 1 conv inputs (raw qkv, before the conv), oldest first;
        zeros where the sequence has seen fewer. ``ssm`` [num_slots, Hv, Dk,
        Dv], in ``state_dtype or dtype``: S after the last token.
    meta: the builder's output for the step.
    Returns: [T, Hv * Dv] before ``out_proj``, in the dtype of qkv.

    What it computes, per sequence i, starting from zeros if context_lens[i]
    is 0, else from the records at slot state_slots[i]; token by token:

        qkv = silu(conv(qkv))     conv[t, c] = conv_bias[c] + sum_j conv_weight[c, j] * qkv[t - (W - 1) + j, c]
        q, k, v = split(qkv, [Hk * Dk, Hk * Dk, Hv * Dv])
        if qk_l2norm: q[j] = q[j] / sqrt(sum(q[j] ** 2) + 1e-6), k alike   # per head
        q = q / sqrt(Dk)
        beta = sigmoid(b);  g = A * softplus(a + dt_bias)                # [Hv]
        for value head h, of query/key head j = h // R:
            S[h] = exp(g[h]) * S[h]
            S[h] = S[h] + outer(k[j], beta[h] * (v[h] - S[h]^T k[j]))     # [Dk, Dv]
            o[h] = S[h]^T q[j]
            if gated_norm:        # else o[h] as it is: z, norm_weight, norm_eps unused
                o[h] = o[h] / sqrt(mean(o[h] ** 2) + norm_eps) * norm_weight * silu(z[h])

    softplus is log(1 + exp(.)). ``chunk_size`` is a hint for chunked scans;
    the result must not depend on it. The oracle,
    ``mixboard_gdn.oracle.GatedDeltaNetOracle``, is the definition.
    """

    @abstractmethod
    def forward(self, qkv: "Tensor", z: "Tensor", b: "Tensor", a: "Tensor", weights: GatedDeltaNetWeights,
                state: Mapping[str, "Tensor"], meta: Any) -> "Tensor":
        """Conv, delta-rule scan and (with gated_norm) the gated norm, states carried in slots; return
        [T, Hv * Dv] (see the class docstring)."""


def gdn_state(spec: GatedDeltaNetSpec) -> StateSpec:
    return StateSpec.slots(
        conv=((spec.conv_dim, spec.d_conv - 1), spec.conv_state_dtype or spec.dtype),
        ssm=((spec.num_v_heads, spec.head_k_dim, spec.head_v_dim), spec.state_dtype or spec.dtype),
    )


GATED_DELTA_NET = Kind(
    name="gated_delta_net",
    spec=GatedDeltaNetSpec,
    impl=GatedDeltaNetImpl,
    state_spec=gdn_state,
    description="Gated DeltaNet: linear attention with a gated delta-rule state and causal conv",
    install_hint="pip install mixboard-gdn",
    conformance="mixboard_gdn.conformance:GATED_DELTA_NET",
    row_inputs={"forward": 4},
)
