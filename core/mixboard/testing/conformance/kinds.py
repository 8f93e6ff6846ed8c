"""What the kit must know about a kind to test its backends: its oracle,
the tensors a step feeds it, the weights a layer holds, and the shapes
worth sweeping.

Every kind's ``forward`` takes the step's per-token tensors first, then the
layer's weights (kinds that have them), then ``state`` and ``meta``::

    attention:  forward(q, k, v, state, meta)
    mamba2:     forward(z, xBC, dt, weights, state, meta)

A kind a plugin defines follows the same order; its plugin describes it
with a :class:`KindAdapter` and gets a suite from
``mixboard.testing.conformance.conformance_suite``.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch

from ...kinds.mamba1 import Mamba1Weights
from ...kinds.mamba2 import Mamba2Weights
from ...kinds.short_conv import ShortConvWeights
from ..oracles import AttentionOracle, Mamba1Oracle, Mamba2Oracle, ShortConvOracle
from .ops import OpAdapter


@dataclass(frozen=True)
class KindAdapter:
    """One kind, described for the kit.

    kind: the kind's name. base: spec fields of the shape most cases use
    (small, so the oracle stays fast). shapes: ``(id, fields)`` pairs swept
    by one case each (fields override ``base``; a shape equal to another
    for some dtype runs once). inputs: ``spec -> {name: (per-token shape,
    scale)}`` in ``forward``'s order; the kit draws ``randn * scale``.
    weights: ``(spec, generator) -> weights`` in float64 (the kit casts
    them to the layer's dtype), or None for a kind without weights.
    oracle: ``spec -> impl``, the reference.

    Optional, for the cases at the sizes real models run: real: spec fields
    of a layer of real width (real head sizes, state sizes and chunk sizes,
    a few heads so the oracle stays affordable), which ``prefill_300`` and
    the thorough mode's long cases use (default: ``base``). long_shapes:
    ``(id, fields)`` pairs over ``real`` that the thorough mode runs with a
    long prompt each (default: none).

    variants: ``(id, fields)`` pairs of spec fields that change what the
    kind computes rather than its size (mamba2's ``gated_norm=False``): each
    runs the representative cases (a ragged prefill, a chunked prefill,
    decodes after prefills, a mixed batch) over ``base`` once more, as
    ``<id>-<case>`` (default: none). ``weights`` gets the variant's spec.
    """

    kind: str
    base: Mapping[str, Any]
    inputs: Callable[[Any], Mapping[str, tuple[tuple[int, ...], float]]]
    oracle: Callable[[Any], Any]
    weights: Callable[[Any, torch.Generator], Any] | None = None
    shapes: tuple[tuple[str, Mapping[str, Any]], ...] = field(default_factory=tuple)
    real: Mapping[str, Any] | None = None
    long_shapes: tuple[tuple[str, Mapping[str, Any]], ...] = field(default_factory=tuple)
    variants: tuple[tuple[str, Mapping[str, Any]], ...] = field(default_factory=tuple)

    def call(self, impl: Any, inputs: Mapping[str, torch.Tensor], weights: Any, state: Any, meta: Any):
        args = list(inputs.values())
        if self.weights is not None:
            args.append(weights)
        return impl.forward(*args, state, meta)


# --------------------------------------------------------------------------- weights


def _randn(gen: torch.Generator, *shape: int, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(shape, generator=gen, dtype=torch.float64) * scale


def _uniform(gen: torch.Generator, lo: float, hi: float, *shape: int) -> torch.Tensor:
    return lo + (hi - lo) * torch.rand(shape, generator=gen, dtype=torch.float64)


def _inverse_softplus(y: torch.Tensor) -> torch.Tensor:
    return torch.log(torch.expm1(y))


def record_items(record: Any) -> dict[str, Any]:
    """The named fields of a weights record: a dataclass, a class with
    ``__slots__`` (the built-in kinds' ``Record``), or a plain object."""
    if dataclasses.is_dataclass(record):
        return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
    names = [n for klass in type(record).__mro__ for n in getattr(klass, "__slots__", ())]
    return {n: getattr(record, n) for n in names} if names else dict(vars(record))


# Fields kept in float32 in a layer of a narrower dtype: the Mamba and Gated DeltaNet decays' A, which
# the runner and vLLM hand over in float32 as transformers and vLLM compute it (-exp(A_log.float())).
FLOAT32_FIELDS = frozenset({"A"})


def cast_weights(weights: Any, dtype: torch.dtype, device: Any) -> Any:
    """A copy of a weights record with every tensor in ``dtype`` on ``device``, but ``FLOAT32_FIELDS``
    no narrower than float32 (built again by keyword, as every kind's weights take them)."""
    if weights is None:
        return None

    def cast(name: str, v: torch.Tensor) -> torch.Tensor:
        want = torch.float32 if name in FLOAT32_FIELDS and dtype.itemsize < 4 else dtype
        return v.to(device=device, dtype=want, copy=True)

    fields = {k: (cast(k, v) if isinstance(v, torch.Tensor) else v) for k, v in record_items(weights).items()}
    return type(weights)(**fields)


# Decays and steps are drawn so that state matters: dt in [0.05, 0.5] keeps a
# few tokens of memory, so a backend that drops or misplaces its state is off
# by far more than any tolerance.

def mamba1_weights(spec, gen: torch.Generator) -> Mamba1Weights:
    di, n, r, w = spec.d_inner, spec.d_state, spec.dt_rank, spec.d_conv
    return Mamba1Weights(
        conv_weight=_randn(gen, di, w, scale=0.5),
        conv_bias=_randn(gen, di, scale=0.2) if spec.conv_bias else None,
        x_proj_weight=_randn(gen, r + 2 * n, di, scale=di ** -0.5),
        dt_proj_weight=_randn(gen, di, r, scale=0.5 * r ** -0.5),
        dt_proj_bias=_inverse_softplus(_uniform(gen, 0.05, 0.5, di)),
        A=-torch.exp(_uniform(gen, math.log(0.5), math.log(max(2.0, n)), di, n)),
        D=_uniform(gen, 0.5, 1.5, di),
        # weights away from 1 so that a backend applying a norm's weight wrongly (or not at all) is off
        dt_norm_weight=_uniform(gen, 0.5, 1.5, r) if spec.dt_bc_norms else None,
        b_norm_weight=_uniform(gen, 0.5, 1.5, n) if spec.dt_bc_norms else None,
        c_norm_weight=_uniform(gen, 0.5, 1.5, n) if spec.dt_bc_norms else None,
    )


def mamba2_weights(spec, gen: torch.Generator) -> Mamba2Weights:
    h = spec.num_heads
    # The norm spans d_inner / n_groups channels of heads whose states differ in scale: past 64 channels
    # its largest outputs grow (11.7 at 512), so the weight shrinks to keep them within ~±4, where an
    # absolute tolerance reads like a relative one.
    norm_scale = min(1.0, (64 / (spec.d_inner // spec.n_groups)) ** 0.5)
    # B and C come out of the conv smaller past 8 states, so that C . B (a sum over d_state) stays of
    # order one: at 128 states it would be ~4x larger, and dt * (C . B) + D cross 0 far more often,
    # where a head's output vanishes and the norm scales up whatever rounding the layer's dtype left.
    bc_scale = min(1.0, (8 / spec.d_state) ** 0.25)
    channels = torch.ones(spec.conv_dim, dtype=torch.float64)
    channels[spec.d_inner:] = bc_scale
    return Mamba2Weights(
        conv_weight=_randn(gen, spec.conv_dim, spec.d_conv, scale=0.5) * channels[:, None],
        conv_bias=_randn(gen, spec.conv_dim, scale=0.2) * channels if spec.conv_bias else None,
        dt_bias=_inverse_softplus(_uniform(gen, 0.05, 0.5, h)),
        A=-_uniform(gen, 0.5, 4.0, h),
        D=_uniform(gen, 0.5, 1.5, h),
        # keeps normalized outputs within ~±4; without the gated norm the layer has none (the caller's)
        norm_weight=_uniform(gen, 0.25, 0.75, spec.d_inner) * norm_scale if spec.gated_norm else None,
    )


def short_conv_weights(spec, gen: torch.Generator) -> ShortConvWeights:
    return ShortConvWeights(
        conv_weight=_randn(gen, spec.hidden_size, spec.conv_width, scale=0.5),
        conv_bias=_randn(gen, spec.hidden_size, scale=0.2) if spec.conv_bias else None,
    )


# --------------------------------------------------------------------------- the built-in kinds


ATTENTION = KindAdapter(
    kind="attention",
    base=dict(num_heads=4, num_kv_heads=2, head_size=16),
    inputs=lambda s: {"q": ((s.num_heads, s.head_size), 1.0),
                      "k": ((s.num_kv_heads, s.head_size), 1.0),
                      "v": ((s.num_kv_heads, s.head_size), 1.0)},
    oracle=AttentionOracle,
    shapes=(
        ("mha", dict(num_heads=2, num_kv_heads=2, head_size=8)),
        ("mqa", dict(num_heads=4, num_kv_heads=1, head_size=32)),
        ("gqa4_head64", dict(num_heads=8, num_kv_heads=2, head_size=64)),
        ("head128", dict(num_heads=2, num_kv_heads=1, head_size=128)),
        ("head12", dict(num_heads=3, num_kv_heads=1, head_size=12)),
        ("non_causal", dict(causal=False)),
        ("sliding_window3", dict(sliding_window=3)),
        ("soft_cap", dict(logits_soft_cap=1.5, scale=0.5)),
        ("scale", dict(scale=0.4)),
        # the other head sizes real models use (64: gqa4_head64, 128: head128)
        ("head80", dict(num_heads=2, num_kv_heads=1, head_size=80)),
        ("head96", dict(num_heads=2, num_kv_heads=1, head_size=96)),
        ("head192", dict(num_heads=2, num_kv_heads=1, head_size=192)),
        ("head256", dict(num_heads=2, num_kv_heads=1, head_size=256)),
    ),
    real=dict(num_heads=4, num_kv_heads=2, head_size=128),  # a slice of a Llama layer: groups of 2, head 128
    long_shapes=(
        ("head64", dict(head_size=64)),
        ("head80", dict(num_heads=2, num_kv_heads=1, head_size=80)),
        ("head96", dict(num_heads=2, num_kv_heads=1, head_size=96)),
        ("head192", dict(num_heads=2, num_kv_heads=1, head_size=192)),
        ("head256", dict(num_heads=2, num_kv_heads=1, head_size=256)),
        ("gqa8", dict(num_heads=8, num_kv_heads=1, head_size=64)),
        ("mha", dict(num_heads=2, num_kv_heads=2)),
        ("non_causal", dict(causal=False)),
        ("sliding_window256", dict(sliding_window=256)),
        ("soft_cap", dict(logits_soft_cap=1.5, scale=0.5)),
    ),
)

MAMBA1 = KindAdapter(
    kind="mamba1",
    base=dict(d_inner=16, d_state=4, d_conv=4, dt_rank=4),
    inputs=lambda s: {"x": ((s.d_inner,), 0.8), "z": ((s.d_inner,), 0.6)},
    oracle=Mamba1Oracle,
    weights=mamba1_weights,
    shapes=(
        ("d_state16", dict(d_inner=32, d_state=16, dt_rank=2)),
        ("d_conv2", dict(d_conv=2)),
        ("d_conv3", dict(d_conv=3)),
        ("no_conv_bias", dict(conv_bias=False)),
        ("dt_rank1", dict(d_inner=24, dt_rank=1)),
        ("d_inner12", dict(d_inner=12)),
        ("state_float32", dict(state_dtype="float32")),
        # vLLM's layout on CPU for a bfloat16 layer: the conv state in bfloat16, the SSM state in float32
        ("conv_bfloat16_ssm_float32", dict(state_dtype="float32", conv_state_dtype="bfloat16")),
        ("d_inner1536", dict(d_inner=1536, d_state=16, dt_rank=48)),  # mamba-130m
        ("d_inner200", dict(d_inner=200, d_state=16, dt_rank=13)),  # channel blocks of 64 and a part
        ("dt_bc_norms", dict(d_inner=32, d_state=8, dt_rank=4, dt_bc_norms=True, norm_eps=1e-5)),  # Jamba
    ),
    real=dict(d_inner=1536, d_state=16, d_conv=4, dt_rank=48),  # mamba-130m
    long_shapes=(
        ("d_inner4096", dict(d_inner=4096, dt_rank=128)),  # mamba-1.4b
        ("state_float32", dict(state_dtype="float32")),
    ),
)

MAMBA2 = KindAdapter(
    kind="mamba2",
    base=dict(num_heads=4, head_dim=4, d_state=8, n_groups=2, d_conv=4, chunk_size=4),
    inputs=lambda s: {"z": ((s.d_inner,), 1.0), "xBC": ((s.conv_dim,), 1.0), "dt": ((s.num_heads,), 0.5)},
    oracle=Mamba2Oracle,
    weights=mamba2_weights,
    shapes=(
        ("one_group", dict(n_groups=1)),
        ("group_per_head", dict(n_groups=4)),
        ("head_dim8_d_state16", dict(head_dim=8, d_state=16, n_groups=1, chunk_size=8)),
        ("chunk5", dict(chunk_size=5)),
        ("d_conv2", dict(d_conv=2)),
        ("no_conv_bias", dict(conv_bias=False)),
        ("dt_limits", dict(dt_min=0.1, dt_max=0.3)),
        ("state_float32", dict(state_dtype="float32")),
        # vLLM's layout on CPU for a bfloat16 layer: the conv state in bfloat16, the SSM state in float32
        ("conv_bfloat16_ssm_float32", dict(state_dtype="float32", conv_state_dtype="bfloat16")),
        ("head_dim64_d_state128", dict(head_dim=64, d_state=128, n_groups=1, chunk_size=256)),
        ("n_groups8", dict(num_heads=16, head_dim=64, d_state=128, n_groups=8, chunk_size=256)),
    ),
    real=dict(num_heads=8, head_dim=64, d_state=128, n_groups=1, d_conv=4, chunk_size=256),  # Mamba-2's widths
    long_shapes=(
        # several heads a group, as real models have: with one, the norm divides by a single head's output,
        # which nears 0 where dt * (C . B) + D does, and over 700 tokens a half-precision rounding blows up there
        ("n_groups8", dict(num_heads=16, n_groups=8)),
        ("chunk128", dict(chunk_size=128)),
        ("state_float32", dict(state_dtype="float32")),
    ),
    # y before the gate and the norm, which the caller applies (vLLM's, reducing across tensor-parallel ranks)
    variants=(("no_gated_norm", dict(gated_norm=False)),),
)

SHORT_CONV = KindAdapter(
    kind="short_conv",
    base=dict(hidden_size=16, conv_width=3),
    inputs=lambda s: {"B": ((s.hidden_size,), 0.6), "C": ((s.hidden_size,), 0.6), "x": ((s.hidden_size,), 0.6)},
    oracle=ShortConvOracle,
    weights=short_conv_weights,
    shapes=(
        ("width2", dict(conv_width=2)),
        ("width4", dict(conv_width=4)),
        ("width6", dict(conv_width=6)),
        ("conv_bias", dict(conv_bias=True)),
        ("hidden24", dict(hidden_size=24)),
        ("hidden12", dict(hidden_size=12)),
        ("state_float32", dict(state_dtype="float32")),
        ("hidden1024", dict(hidden_size=1024)),  # LFM2-350M
        ("hidden200", dict(hidden_size=200)),  # channel blocks of 64 and a part
    ),
    real=dict(hidden_size=1024, conv_width=3),  # LFM2-350M
    long_shapes=(
        ("hidden2048", dict(hidden_size=2048)),  # LFM2-1.2B
        ("width4_bias", dict(conv_width=4, conv_bias=True)),
    ),
)

ADAPTERS: dict[str, KindAdapter] = {a.kind: a for a in (ATTENTION, MAMBA1, MAMBA2, SHORT_CONV)}


def adapter_of(kind: Any) -> Any:
    """The adapter a ``mixboard.Kind`` declares (``conformance=``: a KindAdapter or OpAdapter,
    or the ``"module:NAME"`` it lives at), or None when it declares none."""
    from ...errors import UsageError

    ref = getattr(kind, "conformance", None)
    if ref is None:
        return None
    adapter = ref
    if isinstance(ref, str):
        module, _, name = ref.partition(":")
        if not module or not name:
            raise UsageError(f"kind {kind.name!r} declares conformance={ref!r}; expected a KindAdapter or "
                             f"'module:NAME' (e.g. 'acme_retention.conformance:RETENTION')")
        try:
            adapter = functools.reduce(getattr, name.split("."), importlib.import_module(module))
        except Exception as exc:  # noqa: BLE001 - a plugin's module may raise anything
            raise UsageError(f"kind {kind.name!r}: its conformance adapter {ref!r} does not load: "
                             f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(adapter, (KindAdapter, OpAdapter)):
        raise UsageError(f"kind {kind.name!r}: its conformance {ref!r} is a {type(adapter).__name__}, not a "
                         f"mixboard.testing.conformance.KindAdapter (or OpAdapter, for a dense kind)")
    if adapter.kind != kind.name:
        raise UsageError(f"kind {kind.name!r}: its conformance adapter {ref!r} describes kind {adapter.kind!r}")
    return adapter
