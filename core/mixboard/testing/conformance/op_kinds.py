"""The built-in dense kinds, described for the kit (see ``ops.py``).

Inputs and weights are scaled so that outputs stay of order one (within
about ±5), where the kit's absolute tolerances read like relative ones.
"""

from __future__ import annotations

import torch

from ...dtypes import torch_dtype
from ...kinds.embedding import EmbeddingWeights
from ...kinds.linear import LinearWeights
from ...kinds.moe import MoEWeights
from ...kinds.rms_norm import RMSNormWeights
from ...kinds.rotary import rotary_scaling
from ..op_oracles import ArgmaxOracle, EmbeddingOracle, LinearOracle, MoEOracle, RMSNormOracle, RotaryOracle
from .ops import OpAdapter, OpCall


def _randn(gen: torch.Generator, *shape: int, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(shape, generator=gen, dtype=torch.float64) * scale


def _rows(spec, gen: torch.Generator, rows: int, *shape: int, scale: float = 1.0, dtype: str | None = None):
    """randn * scale, drawn in float64, in the layer's dtype (or ``dtype``)."""
    return _randn(gen, rows, *shape, scale=scale).to(torch_dtype(dtype or spec.dtype))


# --------------------------------------------------------------------------- linear


def linear_weights(spec, gen: torch.Generator) -> LinearWeights:
    rows = spec.weight_rows
    # gated: gate and up a little smaller, so that silu(gate) * up stays within about ±5 as the rest does
    scale = (0.7 if spec.gated else 1.0) * spec.in_features ** -0.5
    return LinearWeights(weight=_randn(gen, rows, spec.in_features, scale=scale),
                         bias=_randn(gen, rows, scale=0.1) if spec.bias else None)


LINEAR = OpAdapter(
    kind="linear",
    base=dict(in_features=64, out_features=48),
    calls=(OpCall("forward(x)", lambda s, t, g, step: {"x": _rows(s, g, t, s.in_features)}),),
    oracle=LinearOracle,
    weights=linear_weights,
    shapes=(
        ("bias", dict(bias=True)),
        ("gated", dict(gated=True)),
        ("gated_bias", dict(gated=True, bias=True)),
        ("odd", dict(in_features=33, out_features=17)),  # no multiple of 16 anywhere: a kernel's tails
        ("odd_gated", dict(in_features=33, out_features=17, gated=True)),
        ("qkv512", dict(in_features=512, out_features=768)),  # q, k and v of a 512-wide layer in one product
        ("mlp512", dict(in_features=512, out_features=1376, gated=True)),  # a real MLP's gate and up
        ("lm_head", dict(in_features=64, out_features=32000)),  # a vocabulary's rows
    ),
    long_shapes=(
        ("mlp2048", dict(in_features=2048, out_features=5632, gated=True)),
        ("lm_head1024", dict(in_features=1024, out_features=32000)),
    ),
)


# --------------------------------------------------------------------------- rms_norm


def rms_norm_weights(spec, gen: torch.Generator) -> RMSNormWeights:
    return RMSNormWeights(weight=0.5 + 0.5 * torch.rand(spec.hidden_size, generator=gen, dtype=torch.float64))


def _residual(spec) -> str | None:
    """The residual stream's dtype after the first block: float32 where the spec keeps it so, else the layer's."""
    return "float32" if spec.residual_fp32 else None


HEADS = 3  # rms_norm over [T, heads, H]: a fused qkv product's q or k heads

RMS_NORM = OpAdapter(
    kind="rms_norm",
    base=dict(hidden_size=64),
    calls=(
        # as a block calls it: x a branch's output in the layer's dtype, added to the residual stream,
        # then the norm (in a half-precision layer with residual_fp32, x bfloat16 and the residual float32)
        OpCall("forward(x, residual)",
               lambda s, t, g, step: {"x": _rows(s, g, t, s.hidden_size, scale=0.5),
                                      "residual": _rows(s, g, t, s.hidden_size, dtype=_residual(s))},
               outputs=("y", "s"), handed=("residual",), may_share={"s": ("residual",)}),
        # the second block with residual_fp32: the residual still in the layer's dtype (the first block's x)
        OpCall("forward(x, residual in the layer's dtype)",
               lambda s, t, g, step: {"x": _rows(s, g, t, s.hidden_size), "residual": _rows(s, g, t, s.hidden_size)},
               outputs=("y", "s"), handed=("residual",), may_share={"s": ("residual",)},
               applies=lambda s: s.residual_fp32 and s.dtype != "float32"),
        # the first block: no residual yet, s is x's values, x itself allowed (never written)
        OpCall("forward(x, residual=None)",
               lambda s, t, g, step: {"x": _rows(s, g, t, s.hidden_size), "residual": None},
               outputs=("y", "s"), may_share={"s": ("x",)}),
        OpCall(f"forward(x [T, {HEADS}, hidden_size], residual=None)",
               lambda s, t, g, step: {"x": _rows(s, g, t, HEADS, s.hidden_size), "residual": None},
               outputs=("y", "s"), may_share={"s": ("x",)}),
    ),
    oracle=RMSNormOracle,
    weights=rms_norm_weights,
    shapes=(
        ("hidden33", dict(hidden_size=33)),
        ("eps1e-5", dict(eps=1e-5)),
        ("residual_fp32", dict(residual_fp32=True)),
        ("hidden128", dict(hidden_size=128)),  # a head's norm (q_norm, k_norm)
        ("hidden4096", dict(hidden_size=4096)),  # a real model's width
    ),
    long_shapes=(("hidden8192", dict(hidden_size=8192)),
                 ("hidden4096_fp32", dict(hidden_size=4096, residual_fp32=True))),
    neighbour=dict(eps=1e-5),
)


# --------------------------------------------------------------------------- rotary

Q_HEADS, K_HEADS = 4, 2


def positions(rows: int, gen: torch.Generator, step: int) -> torch.Tensor:
    """A step's positions: decodes anywhere, then a prefill's run. They reach further each step
    (below 200, 1600, 12800, ...), so that a table grown on demand must grow."""
    reach = 200 * 8 ** step
    decodes = rows // 2
    out = torch.randint(0, reach, (rows,), generator=gen, dtype=torch.int64)
    start = int(torch.randint(0, max(1, reach - rows), (1,), generator=gen))
    out[decodes:] = torch.arange(start, start + rows - decodes)
    return out


def _rotary_inputs(s, t, g, step):
    return {"positions": positions(t, g, step), "q": _rows(s, g, t, Q_HEADS, s.head_size, scale=0.5),
            "k": _rows(s, g, t, K_HEADS, s.head_size, scale=0.5)}


_LLAMA3 = rotary_scaling(dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                              original_max_position_embeddings=8192))

ROTARY = OpAdapter(
    kind="rotary",
    base=dict(head_size=64),
    calls=(OpCall("forward(positions, q, k)", _rotary_inputs, outputs=("q", "k"), handed=("q", "k"),
                  may_share={"q": ("q", "k"), "k": ("q", "k")}, shared=("positions",), fused=("q", "k")),),
    oracle=RotaryOracle,
    shapes=(
        ("rotary_dim32", dict(rotary_dim=32)),  # the first half of each head rotated (GPT-NeoX style partial)
        ("head128", dict(head_size=128, theta=500000.0)),
        ("head80_rotary_dim20", dict(head_size=80, rotary_dim=20)),
        ("linear_scaling", dict(scaling=rotary_scaling(dict(type="linear", factor=4.0)))),
        ("llama3_scaling", dict(head_size=128, theta=500000.0, scaling=_LLAMA3)),
    ),
    long_shapes=(("head256", dict(head_size=256)), ("llama3_head128", dict(head_size=128, scaling=_LLAMA3))),
    neighbour=dict(theta=500000.0),
)


# --------------------------------------------------------------------------- embedding


def embedding_weights(spec, gen: torch.Generator) -> EmbeddingWeights:
    return EmbeddingWeights(weight=_randn(gen, spec.num_embeddings, spec.embedding_dim))


def token_ids(spec, rows: int, gen: torch.Generator) -> torch.Tensor:
    """Ids anywhere in the table, its first and last row among them."""
    ids = torch.randint(0, spec.num_embeddings, (rows,), generator=gen, dtype=torch.int64)
    ids[0] = spec.num_embeddings - 1
    if rows > 1:
        ids[-1] = 0
    return ids


EMBEDDING = OpAdapter(
    kind="embedding",
    base=dict(num_embeddings=1000, embedding_dim=64, tied=True),  # both calls: a tied-only backend runs every case
    calls=(
        OpCall("forward(ids)", lambda s, t, g, step: {"ids": token_ids(s, t, g)}),
        OpCall("logits(hidden)",
               lambda s, t, g, step: {"hidden": _rows(s, g, t, s.embedding_dim, scale=s.embedding_dim ** -0.5)},
               method="logits", applies=lambda s: s.tied),
    ),
    oracle=EmbeddingOracle,
    weights=embedding_weights,
    shapes=(
        ("untied", dict(tied=False)),
        ("dim33", dict(embedding_dim=33, num_embeddings=517)),
        ("vocab32000", dict(num_embeddings=32000)),  # a real vocabulary's LM head
    ),
    long_shapes=(("vocab32000_dim1024", dict(num_embeddings=32000, embedding_dim=1024)),),
)


# --------------------------------------------------------------------------- argmax


def logits(spec, rows: int, gen: torch.Generator) -> torch.Tensor:
    """Rows of logits with what a sampler must get right planted in them:
    row 0 a tie for the largest (the first wins), then a row with two NaNs
    (the first NaN wins), one all -inf (index 0), one -inf but for a single
    value, one with +inf twice, one with a NaN after a +inf; then ties again."""
    dtype = torch_dtype(spec.dtype)
    x = _rows(spec, gen, rows, spec.vocab_size)
    v = spec.vocab_size
    top = 8.0  # above every randn drawn, exact in every dtype

    def at(fraction: float) -> int:
        return min(v - 1, int(fraction * v))

    specials = [
        lambda r: r.index_fill_(0, torch.tensor([at(0.3), at(0.7)]), top),
        lambda r: r.index_fill_(0, torch.tensor([at(0.6), at(0.2)]), float("nan")),
        lambda r: r.fill_(float("-inf")),
        lambda r: r.fill_(float("-inf")).index_fill_(0, torch.tensor([at(0.9)]), -3.0),
        lambda r: r.index_fill_(0, torch.tensor([at(0.8), at(0.4)]), float("inf")),
        lambda r: r.index_fill_(0, torch.tensor([at(0.1)]), float("inf")).index_fill_(0, torch.tensor([at(0.5)]),
                                                                                      float("nan")),
    ]
    for i in range(rows):
        if i < len(specials):
            specials[i](x[i])
        elif i % 3 == 0:  # a tie at random places
            first, second = sorted(torch.randperm(v, generator=gen)[:2].tolist())
            x[i, [first, second]] = top
    return x.to(dtype)


ARGMAX = OpAdapter(
    kind="argmax",
    base=dict(vocab_size=1000),
    calls=(OpCall("forward(logits)", lambda s, t, g, step: {"logits": logits(s, t, g)}, exact=True),),
    oracle=ArgmaxOracle,
    shapes=(("vocab33", dict(vocab_size=33)), ("vocab32000", dict(vocab_size=32000))),
    long_shapes=(("vocab152064", dict(vocab_size=152064)),),
    neighbour=dict(vocab_size=1007),
    long_rows=64,  # the oracle walks each row in Python
)


# --------------------------------------------------------------------------- moe

# Experts 1 and 2 have equal router rows and biases: their logits are equal, exactly, in every case, and
# wherever the two straddle the k-th place the lower index must win. Exactly: the inputs are multiples of
# 1/8 and the router's weights multiples of 2^-10, so every logit is exact in float32 whatever the order
# of its sum; a backend's choice then never differs from the oracle's by rounding, only by its rule.
TIED = (1, 2)


def _dyadic(t: torch.Tensor, step: float) -> torch.Tensor:
    return torch.round(t / step) * step


def _tie(t: torch.Tensor, spec) -> torch.Tensor:
    if spec.num_experts > TIED[1]:
        t[TIED[1]] = t[TIED[0]]
    return t


def moe_weights(spec, gen: torch.Generator) -> MoEWeights:
    e, h, i = spec.num_experts, spec.hidden_size, spec.intermediate_size
    router = _tie(_dyadic(_randn(gen, e, h, scale=h ** -0.5), 2 ** -10), spec)
    if spec.logits_input:  # the caller's router makes the logits (moe_logits)
        router = None
    router_bias = selection_bias = None
    if spec.router_bias:  # the last expert's bias high: (nearly) every row chooses it
        router_bias = _tie(_dyadic(_randn(gen, e, scale=0.5), 2 ** -6), spec)
        router_bias[-1] += 4
    if spec.selection_bias:
        selection_bias = _tie(_dyadic(_randn(gen, e, scale=0.2), 2 ** -8), spec)
    return MoEWeights(router=router, router_bias=router_bias, selection_bias=selection_bias,
                      # relu2's square grows faster than silu(gate) * up: its inputs a little smaller
                      gate_up=_randn(gen, e, spec.up_rows, h, scale=(0.7 if spec.gated else 0.5) * h ** -0.5),
                      down=_randn(gen, e, h, i, scale=i ** -0.5))


def moe_rows(spec, rows: int, gen: torch.Generator) -> torch.Tensor:
    """randn in multiples of 1/8 (exact in every dtype): the router's logits exact in float32."""
    return _dyadic(_randn(gen, rows, spec.hidden_size), 1 / 8).to(torch_dtype(spec.dtype))


def moe_logits(spec, rows: int, gen: torch.Generator) -> torch.Tensor:
    """A caller's router logits in float32 (logits_input), of order one, in multiples of 2^-8 (exact in
    every dtype the kind routes in), experts 1 and 2 equal in every row: ties wherever they straddle."""
    logits = _dyadic(_randn(gen, rows, spec.num_experts), 2 ** -8)
    if spec.num_experts > TIED[1]:
        logits[:, TIED[1]] = logits[:, TIED[0]]
    return logits.float()


MOE = OpAdapter(
    kind="moe",
    base=dict(hidden_size=64, num_experts=8, top_k=2, intermediate_size=32),
    calls=(OpCall("forward(x)", lambda s, t, g, step: {"x": moe_rows(s, t, g)},
                  applies=lambda s: not s.logits_input),
           OpCall("forward(x, logits)", lambda s, t, g, step: {"x": moe_rows(s, t, g), "logits": moe_logits(s, t, g)},
                  applies=lambda s: s.logits_input)),
    oracle=MoEOracle,
    weights=moe_weights,
    shapes=(
        ("normalized", dict(normalize_topk=True)),  # Mixtral, Qwen
        ("topk_softmax", dict(gating="topk_softmax")),  # Granite
        ("sigmoid", dict(gating="sigmoid_topk", activation="relu2", normalize_topk=True, routed_scaling=1.5,
                         selection_bias=True)),  # Nemotron-H
        ("relu2", dict(activation="relu2")),
        # vLLM's Nemotron-H: its gate outside the experts hands over float32 logits
        ("logits_sigmoid", dict(logits_input=True, gating="sigmoid_topk", activation="relu2", normalize_topk=True,
                                routed_scaling=1.5, selection_bias=True)),
        ("logits_softmax", dict(logits_input=True, normalize_topk=True)),
        ("top1", dict(top_k=1)),
        ("top_all", dict(top_k=8)),  # every expert gets every row
        ("router_bias", dict(router_bias=True)),  # one expert gets (nearly) every row
        ("odd", dict(hidden_size=33, intermediate_size=17, num_experts=5, top_k=3)),  # a kernel's tails
        ("experts64", dict(num_experts=64, top_k=6)),  # most experts get no row in a step
        ("hidden512", dict(hidden_size=512, intermediate_size=352, num_experts=16, normalize_topk=True)),
    ),
    long_shapes=(
        ("hidden1024", dict(hidden_size=1024, intermediate_size=256, num_experts=16, top_k=4)),
        ("experts128", dict(hidden_size=128, intermediate_size=64, num_experts=128, top_k=8, normalize_topk=True)),
    ),
    neighbour=dict(top_k=3),
    long_rows=128,  # the oracle walks each row in Python
)

OP_ADAPTERS: dict[str, OpAdapter] = {a.kind: a for a in (LINEAR, RMS_NORM, ROTARY, EMBEDDING, ARGMAX, MOE)}
