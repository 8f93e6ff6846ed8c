"""The oracles of the built-in kinds (mixboard.testing).

Two sorts of tests: tiny cases whose expected numbers are worked out by hand
(in the comments, with ``math`` for the transcendental bits, never with the
torch ops the oracles use), and properties every correct stateful mixer
has: one long prefill equals the same tokens fed in chunks or as prefill
followed by decodes, and a sequence batched with others (ragged, mixed
decodes and prefills) equals the same sequence run alone in other slots and
blocks.
"""

from __future__ import annotations

import math

import pytest
import torch

from mixboard import (
    AttentionSpec, Mamba1Spec, Mamba1Weights, Mamba2Spec, Mamba2Weights, ShortConvSpec, ShortConvWeights, StateSpec,
)
from mixboard.kinds import BUILTIN_KINDS
from mixboard.kinds.attention import attention_state
from mixboard.kinds.mamba1 import mamba1_state
from mixboard.kinds.mamba2 import mamba2_state
from mixboard.kinds.short_conv import short_conv_state
from mixboard.metadata import CommonBatchMetadata
from mixboard.testing import (
    AttentionOracle, Mamba1Oracle, Mamba2Oracle, ShortConvOracle, allocate_state, make_oracle,
)

F64 = torch.float64
LN2, LN3, LN4 = math.log(2), math.log(3), math.log(4)


def tensor(values) -> torch.Tensor:
    return torch.tensor(values, dtype=F64)


def silu(a: float) -> float:
    return a / (1.0 + math.exp(-a))


def softplus(a: float) -> float:
    return math.log1p(math.exp(a))


def meta(query_lens, context_lens, slots, blocks, block_size=1):
    return CommonBatchMetadata.build(query_lens, context_lens, slots, blocks, block_size)


def close(actual: torch.Tensor, expected, tol=1e-12):
    expected = expected if isinstance(expected, torch.Tensor) else tensor(expected)
    torch.testing.assert_close(actual, expected.to(actual.dtype), rtol=tol, atol=tol)


# =========================================================================== attention by hand


def attn_spec(**kw):
    kw.setdefault("num_heads", 1)
    kw.setdefault("num_kv_heads", 1)
    kw.setdefault("head_size", 1)
    kw.setdefault("scale", 1.0)
    return AttentionSpec(dtype="float64", **kw)


def attn_state(spec, num_blocks=3, block_size=1):
    return allocate_state(attention_state(spec), num_blocks, block_size)


def test_attention_causal_by_hand_prefill_then_decode_through_paged_blocks():
    spec = attn_spec()
    state = attn_state(spec)
    state["k_cache"][1] = 7.0  # a block nobody owns: must stay untouched
    state["v_cache"][1] = 7.0
    # q = 1, k = [0, ln 3], v = [1, 5]; blocks of one token, sequence owns blocks [2, 0].
    q, k, v = tensor([[[1.0]], [[1.0]]]), tensor([[[0.0]], [[LN3]]]), tensor([[[1.0]], [[5.0]]])
    out = AttentionOracle(spec).forward(q, k, v, state, meta([2], [0], [0], [[2, 0]]))
    # token 0 sees only itself: v0 = 1.
    # token 1: logits [0, ln 3] -> softmax [1/4, 3/4] -> 1/4 * 1 + 3/4 * 5 = 4.
    close(out, [[[1.0]], [[4.0]]])
    close(state["k_cache"][:, 0, 0, 0], [LN3, 7.0, 0.0])  # position 0 in block 2, position 1 in block 0
    close(state["v_cache"][:, 0, 0, 0], [5.0, 7.0, 1.0])
    # Decode token 2 (q = 1, k = ln 4, v = 6) in block 1: logits [0, ln 3, ln 4] -> weights [1, 3, 4] / 8
    # -> (1 * 1 + 3 * 5 + 4 * 6) / 8 = 40 / 8 = 5. Keys 0 and 1 come back from the cache.
    out = AttentionOracle(spec).forward(tensor([[[1.0]]]), tensor([[[LN4]]]), tensor([[[6.0]]]), state,
                                        meta([1], [2], [0], [[2, 0, 1]]))
    close(out, [[[5.0]]])
    close(state["v_cache"][1, 0, 0, 0], 6.0)


def test_attention_non_causal_by_hand():
    spec = attn_spec(causal=False)
    q, k, v = tensor([[[1.0]], [[1.0]]]), tensor([[[0.0]], [[LN3]]]), tensor([[[1.0]], [[5.0]]])
    out = AttentionOracle(spec).forward(q, k, v, attn_state(spec), meta([2], [0], [0], [[0, 1]]))
    # Both tokens see both keys: logits [0, ln 3] -> 1/4 * 1 + 3/4 * 5 = 4.
    close(out, [[[4.0]], [[4.0]]])


def test_attention_sliding_window_by_hand():
    # q = 1, k = [0, ln 3, 0], v = [1, 5, 9]
    q, k, v = tensor([[[1.0]]] * 3), tensor([[[0.0]], [[LN3]], [[0.0]]]), tensor([[[1.0]], [[5.0]], [[9.0]]])
    m = meta([3], [0], [0], [[0, 1, 2]])
    windowed = attn_spec(sliding_window=2)
    out = AttentionOracle(windowed).forward(q, k, v, attn_state(windowed), m)
    # window 2: token 2 sees positions 1, 2: logits [ln 3, 0] -> 3/4 * 5 + 1/4 * 9 = 6.
    close(out[:, 0, 0], [1.0, 4.0, 6.0])
    full = attn_spec()
    out = AttentionOracle(full).forward(q, k, v, attn_state(full), m)
    # no window: token 2 sees all: logits [0, ln 3, 0] -> (1 + 3 * 5 + 9) / 5 = 5.
    close(out[:, 0, 0], [1.0, 4.0, 5.0])
    one = attn_spec(sliding_window=1)
    out = AttentionOracle(one).forward(q, k, v, attn_state(one), m)
    close(out[:, 0, 0], [1.0, 5.0, 9.0])  # each token sees only itself


def test_attention_soft_cap_by_hand():
    # Cap c = 2, scale 0.5, q = 2: logit = 0.5 * 2 * k = k; capped = 2 * tanh(k / 2).
    # k1 = 2 * atanh(ln 3 / 2) makes the capped logit exactly ln 3 -> output 4 as before.
    k1 = 2 * math.atanh(LN3 / 2)
    q, k, v = tensor([[[2.0]], [[2.0]]]), tensor([[[0.0]], [[k1]]]), tensor([[[1.0]], [[5.0]]])
    capped = attn_spec(scale=0.5, logits_soft_cap=2.0)
    out = AttentionOracle(capped).forward(q, k, v, attn_state(capped), meta([2], [0], [0], [[0, 1]]))
    close(out[:, 0, 0], [1.0, 4.0])
    # Without the cap the logit is k1 itself: weights [1, e^k1] / (1 + e^k1).
    plain = attn_spec(scale=0.5)
    out = AttentionOracle(plain).forward(q, k, v, attn_state(plain), meta([2], [0], [0], [[0, 1]]))
    w1 = math.exp(k1) / (1 + math.exp(k1))
    close(out[:, 0, 0], [1.0, (1 - w1) * 1 + w1 * 5])


def test_attention_gqa_by_hand():
    # 2 query heads share 1 kv head; head_size 2, scale 1.
    spec = attn_spec(num_heads=2, num_kv_heads=1, head_size=2)
    q = tensor([[[1.0, 0.0], [0.0, 1.0]]] * 2)  # head 0 reads k[0], head 1 reads k[1]
    k = tensor([[[0.0, 0.0]], [[LN3, -LN3]]])
    v = tensor([[[1.0, 0.0]], [[5.0, 2.0]]])
    out = AttentionOracle(spec).forward(q, k, v, attn_state(spec, 2, 2), meta([2], [0], [0], [[1]], block_size=2))
    # token 1, head 0: logits [0, ln 3] -> [1/4, 3/4] -> [1/4 + 15/4, 3/4 * 2] = [4, 1.5]
    # token 1, head 1: logits [0, -ln 3] -> [3/4, 1/4] -> [3/4 + 5/4, 2/4] = [2, 0.5]
    close(out, [[[1.0, 0.0], [1.0, 0.0]], [[4.0, 1.5], [2.0, 0.5]]])


def test_attention_default_scale_is_one_over_sqrt_head_size():
    spec = AttentionSpec(num_heads=1, num_kv_heads=1, head_size=4, dtype="float64")
    # scale 1/sqrt(4) = 0.5; q = [2, 0, 0, 0], k1 = [ln 3, 0, 0, 0] -> logit 0.5 * 2 * ln 3 = ln 3.
    q = tensor([[[2.0, 0, 0, 0]]] * 2)
    k = tensor([[[0.0, 0, 0, 0]], [[LN3, 0, 0, 0]]])
    v = tensor([[[1.0, 0, 0, 0]], [[5.0, 0, 0, 0]]])
    out = AttentionOracle(spec).forward(q, k, v, attn_state(spec, 1, 2), meta([2], [0], [0], [[0]], block_size=2))
    close(out[:, 0, 0], [1.0, 4.0])


# =========================================================================== mamba1 by hand


def test_mamba1_by_hand_clean_dt():
    spec = Mamba1Spec(d_inner=1, d_state=1, d_conv=2, dt_rank=1, conv_bias=False, dtype="float64")
    # x_proj = [1, 1, 1]: dt_low = B = C = u (the conv output after silu).
    # dt_proj weight 0, bias ln(e - 1): dt = softplus(ln(e - 1)) = ln(e) = 1.
    # A = -ln 2: exp(dt * A) = 1/2. D = 0.5. conv weight [1, 2] (older input first).
    w = Mamba1Weights(conv_weight=tensor([[1.0, 2.0]]), conv_bias=None, x_proj_weight=tensor([[1.0], [1.0], [1.0]]),
                      dt_proj_weight=tensor([[0.0]]), dt_proj_bias=tensor([math.log(math.e - 1)]),
                      A=tensor([[-LN2]]), D=tensor([0.5]))
    state = allocate_state(mamba1_state(spec), 2)
    state["conv"][1], state["ssm"][1] = 99.0, 99.0  # garbage: a fresh sequence must ignore it
    oracle = Mamba1Oracle(spec)
    out = oracle.forward(tensor([[1.0], [0.25]]), tensor([[1.0], [2.0]]), w, state, meta([2], [0], [1], [[0, 1]]))
    # t0: conv 1*0 + 2*1 = 2, u0 = silu(2); h0 = u0 * u0; y0 = (h0 * u0 + 0.5 u0) * silu(1)
    u0 = silu(2.0)
    h0 = u0 * u0
    y0 = (h0 * u0 + 0.5 * u0) * silu(1.0)
    # t1: conv 1*1 + 2*0.25 = 1.5, u1 = silu(1.5); h1 = h0 / 2 + u1 * u1; y1 = (h1 * u1 + 0.5 u1) * silu(2)
    u1 = silu(1.5)
    h1 = h0 / 2 + u1 * u1
    y1 = (h1 * u1 + 0.5 * u1) * silu(2.0)
    close(out, [[y0], [y1]])
    close(state["conv"][1], [[0.25]])  # the last conv input
    close(state["ssm"][1], [[h1]])
    # decode x = 3, z = 1: conv 0.25 + 2 * 3 = 6.25
    out = oracle.forward(tensor([[3.0]]), tensor([[1.0]]), w, state, meta([1], [2], [1], [[0, 1, 2]]))
    u2 = silu(6.25)
    h2 = h1 / 2 + u2 * u2
    close(out, [[(h2 * u2 + 0.5 * u2) * silu(1.0)]])
    close(state["conv"][1], [[3.0]])
    close(state["ssm"][1], [[h2]])


def test_mamba1_by_hand_split_order_and_per_state_decay():
    spec = Mamba1Spec(d_inner=1, d_state=2, d_conv=2, dt_rank=1, conv_bias=True, dtype="float64")
    # x_proj rows: dt_low <- 1, B <- [2, -1], C <- [3, 0.5]. dt = softplus(0.5 * dt_low + 0.1). A = [-1, -2].
    w = Mamba1Weights(conv_weight=tensor([[1.0, 2.0]]), conv_bias=tensor([0.5]),
                      x_proj_weight=tensor([[1.0], [2.0], [-1.0], [3.0], [0.5]]),
                      dt_proj_weight=tensor([[0.5]]), dt_proj_bias=tensor([0.1]),
                      A=tensor([[-1.0, -2.0]]), D=tensor([0.25]))
    state = allocate_state(mamba1_state(spec), 1)
    oracle = Mamba1Oracle(spec)
    out = oracle.forward(tensor([[1.0]]), tensor([[0.5]]), w, state, meta([1], [0], [0], [[0]]))
    # conv 2 * 1 + 0.5 = 2.5; u = silu(2.5); B = [2u, -u], C = [3u, u/2]
    u = silu(2.5)
    dt = softplus(0.5 * u + 0.1)
    h = [dt * u * 2 * u, dt * u * -u]
    y = (h[0] * 3 * u + h[1] * 0.5 * u + 0.25 * u) * silu(0.5)
    close(out, [[y]])
    close(state["conv"][0], [[1.0]])
    close(state["ssm"][0], [h])
    # decode x = -1, z = 1: conv 1 * 1 + 2 * (-1) + 0.5 = -0.5
    out = oracle.forward(tensor([[-1.0]]), tensor([[1.0]]), w, state, meta([1], [1], [0], [[0]], block_size=2))
    u = silu(-0.5)
    dt = softplus(0.5 * u + 0.1)
    h = [math.exp(-dt) * h[0] + dt * u * 2 * u, math.exp(-2 * dt) * h[1] + dt * u * -u]
    y = (h[0] * 3 * u + h[1] * 0.5 * u + 0.25 * u) * silu(1.0)
    close(out, [[y]])
    close(state["ssm"][0], [h])


# =========================================================================== mamba2 by hand


def test_mamba2_by_hand_one_group():
    # 2 heads of head_dim 1, d_state 1, one group: conv_dim = 2 + 1 + 1 = 4, channels [x0, x1, B, C].
    spec = Mamba2Spec(num_heads=2, head_dim=1, d_state=1, n_groups=1, d_conv=2, conv_bias=False,
                      norm_eps=1e-3, dtype="float64")
    # conv weight [0, 1] on every channel: the conv passes the current input through.
    # dt_bias makes dt = softplus(0 + ln(e - 1)) = 1 and softplus(ln(e^2 - 1)) = 2. A = -ln 2 for both.
    w = Mamba2Weights(conv_weight=tensor([[0.0, 1.0]] * 4), conv_bias=None,
                      dt_bias=tensor([math.log(math.e - 1), math.log(math.e ** 2 - 1)]),
                      A=tensor([-LN2, -LN2]), D=tensor([1.0, 0.0]), norm_weight=tensor([2.0, 3.0]))
    state = allocate_state(mamba2_state(spec), 1)
    oracle = Mamba2Oracle(spec)
    xBC = tensor([[1.0, -2.0, 0.5, 3.0], [0.5, 1.0, -1.0, 2.0]])
    z = tensor([[1.0, 2.0], [-1.0, 0.5]])
    out = oracle.forward(z, xBC, torch.zeros(2, 2, dtype=F64), w, state, meta([2], [0], [0], [[0, 1]]))

    def norm(y0, y1, z0, z1):
        g0, g1 = y0 * silu(z0), y1 * silu(z1)
        rms = math.sqrt((g0 * g0 + g1 * g1) / 2 + 1e-3)
        return [2.0 * g0 / rms, 3.0 * g1 / rms]

    # token 0: X = silu(xBC); S_h = dt_h * X_h * B; y_h = S_h * C + D_h * X_h
    X0, X1, B, C = (silu(a) for a in (1.0, -2.0, 0.5, 3.0))
    S0, S1 = 1.0 * X0 * B, 2.0 * X1 * B
    expect0 = norm(S0 * C + 1.0 * X0, S1 * C + 0.0, 1.0, 2.0)
    # token 1: decay exp(dt * A) = 1/2 (head 0), 1/4 (head 1)
    X0, X1, B, C = (silu(a) for a in (0.5, 1.0, -1.0, 2.0))
    S0, S1 = S0 / 2 + 1.0 * X0 * B, S1 / 4 + 2.0 * X1 * B
    expect1 = norm(S0 * C + 1.0 * X0, S1 * C + 0.0, -1.0, 0.5)
    close(out, [expect0, expect1])
    close(state["ssm"][0], [[[S0]], [[S1]]])
    close(state["conv"][0], [[0.5], [1.0], [-1.0], [2.0]])  # the last raw conv inputs (before silu)


def test_mamba2_by_hand_groups_share_b_c_and_norm_per_group_and_dt_clamp():
    # 4 heads of head_dim 1, 2 groups, d_state 1: heads 0, 1 use B0, C0 and heads 2, 3 use B1, C1;
    # the norm runs over each group of d_inner / n_groups = 2 channels. dt_max 0.7 clamps dt.
    spec = Mamba2Spec(num_heads=4, head_dim=1, d_state=1, n_groups=2, d_conv=2, conv_bias=True,
                      norm_eps=0.0, dt_max=0.7, dtype="float64")
    assert spec.conv_dim == 4 + 2 + 2
    # conv weight [0, 0], bias = the value we want after the conv: conv output = bias, whatever the input.
    pre = [1.0, -1.0, 2.0, 0.5, 1.5, -0.5, 2.0, -3.0]  # x (4), B0, B1, C0, C1
    w = Mamba2Weights(conv_weight=torch.zeros(8, 2, dtype=F64), conv_bias=tensor(pre),
                      dt_bias=tensor([0.0, 0.0, 5.0, 0.0]), A=tensor([-1.0] * 4), D=tensor([0.0, 0.5, 0.0, -1.0]),
                      norm_weight=tensor([1.0, 2.0, 3.0, 4.0]))
    state = allocate_state(mamba2_state(spec), 1)
    out = Mamba2Oracle(spec).forward(torch.zeros(1, 4, dtype=F64) + 3.0, torch.zeros(1, 8, dtype=F64),
                                     tensor([[-10.0, 0.0, 0.0, 1.0]]), w, state, meta([1], [0], [0], [[0]]))
    x = [silu(a) for a in pre[:4]]
    B0, B1, C0, C1 = (silu(a) for a in pre[4:])
    # dt = softplus(dt + dt_bias): [softplus(-10) ~ 4.5e-5, ln 2 ~ 0.693, softplus(5) ~ 5.007, softplus(1) ~ 1.313]
    dt = [softplus(-10.0), LN2, 0.7, 0.7]  # the last two clamped to dt_max
    S = [dt[0] * x[0] * B0, dt[1] * x[1] * B0, dt[2] * x[2] * B1, dt[3] * x[3] * B1]
    y = [S[0] * C0, S[1] * C0 + 0.5 * x[1], S[2] * C1, S[3] * C1 - 1.0 * x[3]]
    g = [v * silu(3.0) for v in y]
    rms0 = math.sqrt((g[0] ** 2 + g[1] ** 2) / 2)
    rms1 = math.sqrt((g[2] ** 2 + g[3] ** 2) / 2)
    close(out, [[g[0] / rms0 * 1.0, g[1] / rms0 * 2.0, g[2] / rms1 * 3.0, g[3] / rms1 * 4.0]])
    close(state["ssm"][0], [[[v]] for v in S])


def test_mamba2_by_hand_without_the_gated_norm():
    # test_mamba2_by_hand_one_group's layer with gated_norm=False: y = S @ C + D * x, returned before the gate
    # and the norm. z is NaN and norm_weight None: neither may be read.
    spec = Mamba2Spec(num_heads=2, head_dim=1, d_state=1, n_groups=1, d_conv=2, conv_bias=False,
                      norm_eps=1e-3, dtype="float64", gated_norm=False)
    w = Mamba2Weights(conv_weight=tensor([[0.0, 1.0]] * 4), conv_bias=None,
                      dt_bias=tensor([math.log(math.e - 1), math.log(math.e ** 2 - 1)]),
                      A=tensor([-LN2, -LN2]), D=tensor([1.0, 0.0]), norm_weight=None)
    state = allocate_state(mamba2_state(spec), 1)
    xBC = tensor([[1.0, -2.0, 0.5, 3.0], [0.5, 1.0, -1.0, 2.0]])
    z = torch.full((2, 2), math.nan, dtype=F64)
    out = Mamba2Oracle(spec).forward(z, xBC, torch.zeros(2, 2, dtype=F64), w, state, meta([2], [0], [0], [[0, 1]]))
    X0, X1, B, C = (silu(a) for a in (1.0, -2.0, 0.5, 3.0))
    S0, S1 = 1.0 * X0 * B, 2.0 * X1 * B
    expect0 = [S0 * C + 1.0 * X0, S1 * C + 0.0]
    X0, X1, B, C = (silu(a) for a in (0.5, 1.0, -1.0, 2.0))
    S0, S1 = S0 / 2 + 1.0 * X0 * B, S1 / 4 + 2.0 * X1 * B
    close(out, [expect0, [S0 * C + 1.0 * X0, S1 * C + 0.0]])
    close(state["ssm"][0], [[[S0]], [[S1]]])
    close(state["conv"][0], [[0.5], [1.0], [-1.0], [2.0]])


# =========================================================================== short_conv by hand


def test_short_conv_by_hand():
    spec = ShortConvSpec(hidden_size=1, conv_width=2, dtype="float64")
    w = ShortConvWeights(conv_weight=tensor([[1.0, 2.0]]), conv_bias=None)
    state = allocate_state(short_conv_state(spec), 2)
    state["conv"][1] = 99.0  # garbage the fresh sequence must ignore
    oracle = ShortConvOracle(spec)
    # B * x = [1 * 3, 2 * 1, 0.5 * 4] = [3, 2, 2]; conv [1, 2]: [0 + 6, 3 + 4, 2 + 4] = [6, 7, 6]
    # C = [1, -1, 0.5] -> y = [6, -7, 3]
    out = oracle.forward(tensor([[1.0], [2.0], [0.5]]), tensor([[1.0], [-1.0], [0.5]]), tensor([[3.0], [1.0], [4.0]]),
                         w, state, meta([3], [0], [1], [[0, 1, 2]]))
    close(out, [[6.0], [-7.0], [3.0]])
    close(state["conv"][1], [[2.0]])  # the conv state stores B * x
    # decode B = 1, x = 1, C = 2: conv 2 + 2 * 1 = 4 -> y = 8
    out = oracle.forward(tensor([[1.0]]), tensor([[2.0]]), tensor([[1.0]]), w, state,
                         meta([1], [3], [1], [[0, 1, 2, 3]]))
    close(out, [[8.0]])
    close(state["conv"][1], [[1.0]])


def test_short_conv_state_is_oldest_first_and_bias_added():
    spec = ShortConvSpec(hidden_size=1, conv_width=3, conv_bias=True, dtype="float64")
    w = ShortConvWeights(conv_weight=tensor([[1.0, 10.0, 100.0]]), conv_bias=tensor([0.5]))
    state = allocate_state(short_conv_state(spec), 1)
    oracle = ShortConvOracle(spec)
    one = tensor([[1.0]])

    def step(value, context):
        return oracle.forward(one, one, tensor([[value]]), w, state, meta([1], [context], [0], [[0]], block_size=8))

    close(step(7.0, 0), [[700.5]])  # 1*0 + 10*0 + 100*7 + 0.5
    close(state["conv"][0], [[0.0, 7.0]])  # fewer inputs than width - 1: zeros in the oldest column
    close(step(1.0, 1), [[170.5]])  # 1*0 + 10*7 + 100*1 + 0.5
    close(state["conv"][0], [[7.0, 1.0]])
    close(step(2.0, 2), [[217.5]])  # 1*7 + 10*1 + 100*2 + 0.5
    close(state["conv"][0], [[1.0, 2.0]])


# =========================================================================== properties


NUM_POOL = 10  # blocks (paged) or slots
BLOCK_SIZE = 2


class Case:
    """One kind + spec: random inputs per sequence and a call into the oracle."""

    def __init__(self, kind, spec, names, widths, weights=None, oracle=None):
        self.kind, self.spec, self.names, self.widths, self.weights = kind, spec, names, widths, weights
        self.oracle = oracle or make_oracle(kind, spec)

    def inputs(self, gen, length):
        return {n: torch.randn((length, *w), generator=gen, dtype=F64) for n, w in zip(self.names, self.widths)}

    def fresh_state(self, gen):
        """Pools full of garbage: nothing a correct oracle reads may come from it."""
        state = allocate_state(make_state_spec(self.kind, self.spec), NUM_POOL, BLOCK_SIZE)
        for pool in state.values():
            pool.copy_(torch.randn(pool.shape, generator=gen, dtype=F64) * 100)
        return state

    def __call__(self, packed, state, m):
        args = [packed[n] for n in self.names]
        if self.weights is None:
            return self.oracle.forward(*args, state, m)
        return self.oracle.forward(*args, self.weights, state, m)


def make_state_spec(kind, spec) -> StateSpec:
    return {"attention": attention_state, "mamba1": mamba1_state, "mamba2": mamba2_state,
            "short_conv": short_conv_state}[kind](spec)


def rand(gen, *shape, scale=1.0):
    return torch.randn(shape, generator=gen, dtype=F64) * scale


def attention_case(**kw):
    spec = AttentionSpec(dtype="float64", **kw)
    kv = (spec.num_kv_heads, spec.head_size)
    return Case("attention", spec, ("q", "k", "v"), ((spec.num_heads, spec.head_size), kv, kv))


def mamba1_case(**kw):
    spec = Mamba1Spec(dtype="float64", **kw)
    g = torch.Generator().manual_seed(1)
    DI, N, R = spec.d_inner, spec.d_state, spec.dt_rank
    w = Mamba1Weights(conv_weight=rand(g, DI, spec.d_conv, scale=0.5),
                      conv_bias=rand(g, DI, scale=0.1) if spec.conv_bias else None,
                      x_proj_weight=rand(g, R + 2 * N, DI, scale=0.5), dt_proj_weight=rand(g, DI, R, scale=0.5),
                      dt_proj_bias=rand(g, DI, scale=0.5) - 1.0, A=-torch.exp(rand(g, DI, N, scale=0.5)),
                      D=rand(g, DI))
    return Case("mamba1", spec, ("x", "z"), ((DI,), (DI,)), w)


def mamba2_case(**kw):
    spec = Mamba2Spec(dtype="float64", **kw)
    g = torch.Generator().manual_seed(2)
    H, CD = spec.num_heads, spec.conv_dim
    w = Mamba2Weights(conv_weight=rand(g, CD, spec.d_conv, scale=0.5),
                      conv_bias=rand(g, CD, scale=0.1) if spec.conv_bias else None,
                      dt_bias=rand(g, H, scale=0.5) - 1.0, A=-torch.exp(rand(g, H, scale=0.5)), D=rand(g, H),
                      norm_weight=1.0 + rand(g, spec.d_inner, scale=0.1) if spec.gated_norm else None)
    return Case("mamba2", spec, ("z", "xBC", "dt"), ((spec.d_inner,), (CD,), (H,)), w)


def short_conv_case(**kw):
    spec = ShortConvSpec(dtype="float64", **kw)
    g = torch.Generator().manual_seed(3)
    HS = spec.hidden_size
    w = ShortConvWeights(conv_weight=rand(g, HS, spec.conv_width, scale=0.5),
                         conv_bias=rand(g, HS, scale=0.1) if spec.conv_bias else None)
    return Case("short_conv", spec, ("B", "C", "x"), ((HS,), (HS,), (HS,)), w)


CAUSAL_CASES = {
    "attention-mha": lambda: attention_case(num_heads=2, num_kv_heads=2, head_size=4),
    "attention-gqa-window-cap": lambda: attention_case(num_heads=4, num_kv_heads=2, head_size=4, sliding_window=3,
                                                       logits_soft_cap=5.0),
    "attention-mqa-scale": lambda: attention_case(num_heads=3, num_kv_heads=1, head_size=2, scale=0.3),
    "mamba1": lambda: mamba1_case(d_inner=4, d_state=3, d_conv=4, dt_rank=2),
    "mamba1-w2-nobias": lambda: mamba1_case(d_inner=3, d_state=2, d_conv=2, dt_rank=1, conv_bias=False),
    "mamba2-groups": lambda: mamba2_case(num_heads=4, head_dim=2, d_state=3, n_groups=2, d_conv=4),
    "mamba2-no_gated_norm": lambda: mamba2_case(num_heads=4, head_dim=2, d_state=3, n_groups=2, d_conv=4,
                                                gated_norm=False),
    "mamba2-clamp": lambda: mamba2_case(num_heads=2, head_dim=3, d_state=2, n_groups=1, d_conv=3, dt_min=0.05,
                                        dt_max=0.4, conv_bias=False),
    "short_conv": lambda: short_conv_case(hidden_size=5, conv_width=3),
    "short_conv-w4-bias": lambda: short_conv_case(hidden_size=3, conv_width=4, conv_bias=True),
}

LEN = {"a": 9, "b": 6}
PLACES = {  # (slot, blocks) per sequence: two different placements of the same sequences
    "first": {"a": (1, [7, 1, 4, 9, 2]), "b": (3, [0, 8, 3])},
    "second": {"a": (6, [3, 5, 6, 0, 8]), "b": (0, [9, 2, 4])},
}
SCHEDULES = {
    "one step": [[("a", 9)]],
    "chunks": [[("a", 4)], [("a", 3)], [("a", 2)]],
    "prefill + decodes": [[("a", 5)], [("a", 1)], [("a", 1)], [("a", 1)], [("a", 1)]],
    "one token at a time": [[("a", 1)]] * 9,
    # ragged batches mixing decodes (first) and prefill chunks of two sequences
    "batched": [[("a", 3), ("b", 4)], [("b", 1), ("a", 4)], [("a", 1), ("b", 1)], [("a", 1)]],
}


def run(case, schedule, place, gen_seed=0):
    """Feed the sequences' tokens by ``schedule``; return each sequence's outputs and the final state."""
    gen = torch.Generator().manual_seed(gen_seed)
    inputs = {"a": case.inputs(gen, LEN["a"]), "b": case.inputs(gen, LEN["b"])}
    state = case.fresh_state(gen)
    done = {"a": 0, "b": 0}
    outs = {"a": [], "b": []}
    for step in schedule:
        m = CommonBatchMetadata.build([n for _, n in step], [done[s] for s, _ in step],
                                      [PLACES[place][s][0] for s, _ in step], [PLACES[place][s][1] for s, _ in step],
                                      BLOCK_SIZE)
        packed = {name: torch.cat([inputs[s][name][done[s]: done[s] + n] for s, n in step]) for name in case.names}
        y = case(packed, state, m)
        assert y.shape[0] == sum(n for _, n in step) and y.dtype == F64
        for (s, n), part in zip(step, y.split([n for _, n in step])):
            outs[s].append(part)
            done[s] += n
    return {s: torch.cat(o) for s, o in outs.items() if o}, state


def seq_state(case, state, place, seq):
    """What ``seq`` left in the pools: its slot's records, or its cached tokens."""
    slot, blocks = PLACES[place][seq]
    if case.kind != "attention":
        return {n: p[slot] for n, p in state.items()}
    positions = range(LEN[seq])
    return {n: torch.stack([p[blocks[i // BLOCK_SIZE], i % BLOCK_SIZE] for i in positions]) for n, p in state.items()}


@pytest.mark.parametrize("schedule", [s for s in SCHEDULES if s != "one step"])
@pytest.mark.parametrize("case_name", list(CAUSAL_CASES))
def test_schedules_agree_with_one_prefill(case_name, schedule):
    case = CAUSAL_CASES[case_name]()
    ref, ref_state = run(case, SCHEDULES["one step"], "first")
    got, got_state = run(case, SCHEDULES[schedule], "second")
    torch.testing.assert_close(got["a"], ref["a"], rtol=1e-10, atol=1e-10)
    for name, tensor_ in seq_state(case, got_state, "second", "a").items():
        torch.testing.assert_close(tensor_, seq_state(case, ref_state, "first", "a")[name], rtol=1e-10, atol=1e-10)
    if schedule == "batched":  # b, batched with a, equals b run alone elsewhere
        alone, _ = run(case, [[("b", 6)]], "first")
        torch.testing.assert_close(got["b"], alone["b"], rtol=1e-10, atol=1e-10)


def test_fresh_prefill_ignores_garbage_in_its_slot_but_continuation_reads_it():
    case = CAUSAL_CASES["mamba2-groups"]()
    gen = torch.Generator().manual_seed(5)
    x = case.inputs(gen, 3)
    outs = []
    for fill in (0.0, 1e3):
        state = case.fresh_state(gen)
        for pool in state.values():
            pool.fill_(fill)
        outs.append(case(x, state, meta([3], [0], [2], [[0, 1]], block_size=2)))
    torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=0)
    state = case.fresh_state(gen)
    for pool in state.values():
        pool.fill_(1.0)
    continued = case(x, state, meta([3], [4], [2], [[0, 1, 2, 3]], block_size=2))
    assert not torch.allclose(continued, outs[0])


def test_mamba2_with_the_gated_norm_is_the_callers_norm_over_y_without_it():
    """What an engine does with gated_norm=False (vLLM's Mixer2RMSNormGated, its variance summed over
    ranks): rmsnorm(y * silu(z)) * norm_weight over groups of d_inner / n_groups channels, written here
    without the oracle, over the ungated oracle's y, is the gated oracle's output. Same weights (the
    ungated case leaves out only norm_weight), inputs and garbage-filled pools; ragged batched steps."""
    gated, ungated = CAUSAL_CASES["mamba2-groups"](), CAUSAL_CASES["mamba2-no_gated_norm"]()
    assert ungated.weights.norm_weight is None and torch.equal(ungated.weights.D, gated.weights.D)
    want, want_state = run(gated, SCHEDULES["batched"], "first")
    y, y_state = run(ungated, SCHEDULES["batched"], "first")
    gen = torch.Generator().manual_seed(0)  # run's draw: a's inputs, then b's
    z = {"a": ungated.inputs(gen, LEN["a"])["z"], "b": ungated.inputs(gen, LEN["b"])["z"]}
    spec = gated.spec
    groups = spec.d_inner // spec.n_groups
    for seq in ("a", "b"):
        g = (y[seq] * z[seq] / (1 + torch.exp(-z[seq]))).view(-1, spec.n_groups, groups)
        normed = g / torch.sqrt(g.square().mean(-1, keepdim=True) + spec.norm_eps)
        torch.testing.assert_close(normed.view(-1, spec.d_inner) * gated.weights.norm_weight, want[seq],
                                   rtol=1e-10, atol=1e-10)
        assert not torch.allclose(y[seq], want[seq])
    for name in want_state:  # the state does not depend on the norm
        torch.testing.assert_close(y_state[name], want_state[name], rtol=0, atol=0)


# --------------------------------------------------------------------------- attention against a dense reference


def dense_attention(spec, q, k, v):
    """Attention of one fresh sequence, vectorized (an independent formulation)."""
    T, H, D = q.shape
    k = k.repeat_interleave(H // spec.num_kv_heads, dim=1)
    v = v.repeat_interleave(H // spec.num_kv_heads, dim=1)
    logits = torch.einsum("thd,shd->hts", q, k) * spec.softmax_scale
    if spec.logits_soft_cap is not None:
        logits = spec.logits_soft_cap * torch.tanh(logits / spec.logits_soft_cap)
    pos = torch.arange(T)
    allowed = torch.ones(T, T, dtype=torch.bool)
    if spec.causal:
        allowed &= pos[None, :] <= pos[:, None]
        if spec.sliding_window is not None:
            allowed &= pos[None, :] > pos[:, None] - spec.sliding_window
    logits = logits.masked_fill(~allowed, float("-inf"))
    return torch.einsum("hts,shd->thd", torch.softmax(logits, dim=-1), v)


@pytest.mark.parametrize("kw", [
    dict(num_heads=2, num_kv_heads=2, head_size=4),
    dict(num_heads=4, num_kv_heads=2, head_size=4, sliding_window=3, logits_soft_cap=5.0),
    dict(num_heads=3, num_kv_heads=1, head_size=2, scale=0.3),
    dict(num_heads=4, num_kv_heads=1, head_size=3, causal=False),
    dict(num_heads=2, num_kv_heads=2, head_size=4, causal=False, logits_soft_cap=1.0),
])
def test_attention_matches_dense_reference(kw):
    case = attention_case(**kw)
    got, _ = run(case, SCHEDULES["batched"] if case.spec.causal else [[("a", 9), ("b", 6)]], "first")
    gen = torch.Generator().manual_seed(0)
    for s in ("a", "b"):
        x = case.inputs(gen, LEN[s])
        torch.testing.assert_close(got[s], dense_attention(case.spec, x["q"], x["k"], x["v"]), rtol=1e-10, atol=1e-10)


def test_non_causal_prefill_sees_context_and_all_new_tokens():
    # A non-causal chunk attends over the cached context and every new token of the step.
    spec = attn_spec(causal=False)
    state = attn_state(spec)
    oracle = AttentionOracle(spec)
    oracle.forward(tensor([[[0.0]]]), tensor([[[0.0]]]), tensor([[[1.0]]]), state, meta([1], [0], [0], [[0]]))
    # now keys [0, ln 3, 0], values [1, 5, 9]: weights [1, 3, 1] / 5 -> (1 + 15 + 9) / 5 = 5 for both queries
    out = oracle.forward(tensor([[[1.0]], [[1.0]]]), tensor([[[LN3]], [[0.0]]]), tensor([[[5.0]], [[9.0]]]), state,
                         meta([2], [1], [0], [[0, 1, 2]]))
    close(out[:, 0, 0], [5.0, 5.0])


# --------------------------------------------------------------------------- dtypes


def test_output_has_input_dtype_and_state_keeps_pool_dtype():
    spec = Mamba1Spec(d_inner=4, d_state=2, d_conv=3, dt_rank=1, dtype="bfloat16", state_dtype="float32")
    case = mamba1_case(d_inner=4, d_state=2, d_conv=3, dt_rank=1)
    state = allocate_state(mamba1_state(spec), 2)
    assert {p.dtype for p in state.values()} == {torch.float32}
    x = torch.randn(3, 4).to(torch.bfloat16)
    w = Mamba1Weights(**{f: (getattr(case.weights, f).to(torch.bfloat16) if getattr(case.weights, f) is not None
                             else None) for f in ("conv_weight", "conv_bias", "x_proj_weight", "dt_proj_weight",
                                                  "dt_proj_bias", "A", "D")})
    y = Mamba1Oracle(spec).forward(x, x, w, state, meta([3], [0], [1], [[0]], block_size=4))
    assert y.dtype == torch.bfloat16 and y.shape == (3, 4)
    assert {p.dtype for p in state.values()} == {torch.float32}
    aspec = AttentionSpec(num_heads=2, num_kv_heads=1, head_size=4, dtype="float16")
    astate = allocate_state(attention_state(aspec), 2, 4)
    assert astate["k_cache"].dtype == torch.float16 and astate["k_cache"].shape == (2, 4, 1, 4)
    q = torch.randn(3, 2, 4).half()
    out = AttentionOracle(aspec).forward(q, q[:, :1], q[:, :1], astate, meta([3], [0], [0], [[1]], block_size=4))
    assert out.dtype == torch.float16


# --------------------------------------------------------------------------- helpers and errors


def test_allocate_state_shapes():
    pools = allocate_state(attention_state(AttentionSpec(num_kv_heads=2, num_heads=4, head_size=8)), 5, 16)
    assert {n: tuple(p.shape) for n, p in pools.items()} == {"k_cache": (5, 16, 2, 8), "v_cache": (5, 16, 2, 8)}
    pools = allocate_state(mamba2_state(Mamba2Spec(num_heads=4, head_dim=2, d_state=3, n_groups=2, d_conv=4)), 7)
    assert {n: tuple(p.shape) for n, p in pools.items()} == {"conv": (7, 8 + 12, 3), "ssm": (7, 4, 2, 3)}
    assert all(float(p.abs().sum()) == 0 for p in pools.values())
    with pytest.raises(ValueError, match="block_size"):
        allocate_state(attention_state(AttentionSpec()), 5)


@pytest.mark.parametrize("kind", BUILTIN_KINDS, ids=lambda k: k.name)
def test_make_oracle_returns_the_kinds_impl(kind):
    assert isinstance(make_oracle(kind.name, kind.default_spec()), kind.impl)


def test_make_oracle_errors():
    with pytest.raises(ValueError, match="no oracle for kind 'nope'.*attention, mamba1, mamba2, short_conv, linear, rms_norm"):
        make_oracle("nope", AttentionSpec())
    with pytest.raises(ValueError, match="needs a Mamba2Spec"):
        make_oracle("mamba2", Mamba1Spec())
    with pytest.raises(ValueError, match="sliding_window is defined for causal attention only"):
        AttentionOracle(AttentionSpec(causal=False, sliding_window=4))


def test_bad_inputs_get_clear_errors():
    spec = attn_spec(num_heads=2, num_kv_heads=1, head_size=2)
    state = attn_state(spec, 2, 2)
    q, kv = torch.zeros(2, 2, 2, dtype=F64), torch.zeros(2, 1, 2, dtype=F64)
    m = meta([2], [0], [0], [[0]], block_size=2)
    oracle = AttentionOracle(spec)
    with pytest.raises(ValueError, match=r"k must have shape \[2, 1, 2\], not \[2, 2, 2\]"):
        oracle.forward(q, q, kv, state, m)
    with pytest.raises(ValueError, match=r"q must have shape \[T, 2, 2\], not \[2, 4\]"):
        oracle.forward(q.reshape(2, 4), kv, kv, state, m)
    with pytest.raises(ValueError, match="the inputs hold 2 tokens but the metadata describes 3"):
        oracle.forward(q, kv, kv, state, meta([3], [0], [0], [[0, 1]], block_size=2))
    with pytest.raises(ValueError, match="pool named 'v_cache'"):
        oracle.forward(q, kv, kv, {"k_cache": state["k_cache"]}, m)
    with pytest.raises(ValueError, match="CommonBatchMetadata"):
        oracle.forward(q, kv, kv, state, object())
    with pytest.raises(ValueError, match="outside the pool of 2 blocks"):
        oracle.forward(q, kv, kv, state, meta([2], [0], [0], [[5]], block_size=2))

    case = CAUSAL_CASES["short_conv"]()
    x = case.inputs(torch.Generator().manual_seed(0), 2)
    sc_state = allocate_state(short_conv_state(case.spec), 2)
    with pytest.raises(ValueError, match="state slot 4, outside the pool of 2 slots"):
        case(x, sc_state, meta([2], [0], [4], [[0, 1]]))
    with pytest.raises(ValueError, match="state slot 1 is given to two sequences"):
        case({n: torch.cat([t, t]) for n, t in x.items()}, sc_state, meta([2, 2], [0, 0], [1, 1], [[0, 1], [2, 3]]))
    with pytest.raises(ValueError, match=r"'conv' must have shape \[num_slots, 5, 2\]"):
        case(x, {"conv": torch.zeros(2, 5, 3, dtype=F64)}, meta([2], [0], [0], [[0, 1]]))
    with pytest.raises(ValueError, match="conv_bias=False but weights.conv_bias is set"):
        ShortConvOracle(case.spec).forward(x["B"], x["C"], x["x"],
                                           ShortConvWeights(case.weights.conv_weight, torch.zeros(5, dtype=F64)),
                                           sc_state, meta([2], [0], [0], [[0, 1]]))
