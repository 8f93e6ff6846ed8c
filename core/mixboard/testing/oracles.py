"""Reference implementations ("oracles") of the four built-in kinds.

An oracle is the executable definition of what a kind computes, state
included. It is written to be obviously correct, not fast: it loops over the
sequences of a step and over their tokens in Python, computes in float64, and
casts the output back to the dtype of its main input. A backend is right when
it agrees with its kind's oracle within the tolerance of its dtype.

Every oracle takes the step's :class:`~mixboard.metadata.CommonBatchMetadata`
as ``meta`` (its builder is the identity) and the layer's pools, in the
kind's canonical layout, as ``state``; it updates ``state`` in place.

Rules shared by the kinds with slot state (mamba1, mamba2, short_conv):

* A sequence whose ``context_lens`` is 0 starts from zero state, whatever its
  slot holds; otherwise it continues from the conv and SSM state saved in its
  slot ``meta.state_slots[i]``. After the step, the sequence's updated state
  is written back to that slot.
* The conv state holds the last ``width - 1`` conv *inputs* of the sequence,
  oldest first (column -1 is the newest). A sequence that has seen fewer
  inputs than that keeps zeros in the oldest columns.
* The depthwise causal conv is
  ``out[t, c] = bias[c] + sum_{k<w} weight[c, k] * in[t - (w - 1) + k, c]``,
  where inputs before the start of the step come from the conv state.

Example::

    from mixboard import AttentionSpec, CommonBatchMetadata
    from mixboard.kinds.attention import attention_state
    from mixboard.testing import AttentionOracle, allocate_state

    spec = AttentionSpec(num_heads=2, num_kv_heads=1, head_size=4)
    state = allocate_state(attention_state(spec), num_blocks_or_slots=4, block_size=2)
    meta = CommonBatchMetadata.build([3], [0], [0], [[2, 0]], block_size=2)
    out = AttentionOracle(spec).forward(q, k, v, state, meta)   # q: [3, 2, 4]; k, v: [3, 1, 4]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch
from torch import Tensor

from ..dtypes import torch_dtype
from ..kinds.attention import AttentionImpl, AttentionSpec
from ..kinds.mamba1 import Mamba1Impl, Mamba1Spec, Mamba1Weights
from ..kinds.mamba2 import Mamba2Impl, Mamba2Spec, Mamba2Weights
from ..kinds.short_conv import ShortConvImpl, ShortConvSpec, ShortConvWeights
from ..metadata import CommonBatchMetadata
from ..state import PAGED, SLOTS, StateSpec

__all__ = [
    "AttentionOracle", "Mamba1Oracle", "Mamba2Oracle", "ShortConvOracle", "ORACLES", "allocate_state", "make_oracle",
]

F64 = torch.float64


# --------------------------------------------------------------------------- state


def allocate_state(state_spec: StateSpec, num_blocks_or_slots: int, block_size: int | None = None,
                   device: str | torch.device = "cpu") -> dict[str, Tensor]:
    """Zero pools for ``state_spec``: a paged tensor of per-token shape ``s``
    becomes ``[num_blocks, block_size, *s]``, a slots tensor of per-sequence
    shape ``s`` becomes ``[num_slots, *s]``. ``block_size`` is required for a
    paged spec and ignored for a slots spec."""
    if not isinstance(state_spec, StateSpec):
        raise ValueError(f"allocate_state needs a StateSpec, not {type(state_spec).__name__}")
    if num_blocks_or_slots < 1:
        raise ValueError(f"num_blocks_or_slots must be at least 1, not {num_blocks_or_slots}")
    if state_spec.layout == PAGED:
        if block_size is None or block_size < 1:
            raise ValueError(f"a paged state needs a positive block_size, not {block_size!r}")
        lead: tuple[int, ...] = (num_blocks_or_slots, block_size)
    else:
        assert state_spec.layout == SLOTS
        lead = (num_blocks_or_slots,)
    return {
        name: torch.zeros(lead + tuple(t.shape), dtype=torch_dtype(t.dtype), device=device)
        for name, t in state_spec.tensors
    }


# --------------------------------------------------------------------------- shared helpers


@dataclass(frozen=True)
class _Seq:
    """One sequence of a step, in plain Python ints."""

    index: int
    start: int  # first of its new tokens along the packed token axis
    end: int  # one past its last new token
    context_len: int  # tokens processed in earlier steps
    seq_len: int  # context_len + new tokens
    slot: int  # its record in 'slots' pools
    blocks: tuple[int, ...]  # its row of the block table


def _sequences(meta: Any, num_tokens: int) -> list[_Seq]:
    if not isinstance(meta, CommonBatchMetadata):
        raise ValueError(f"an oracle takes the step's CommonBatchMetadata as meta, not {type(meta).__name__}")
    if meta.num_tokens != num_tokens:
        raise ValueError(f"the inputs hold {num_tokens} tokens but the metadata describes {meta.num_tokens}")
    qsl = meta.query_start_loc_cpu.tolist()
    ctx = meta.context_lens_cpu.tolist()
    seq = meta.seq_lens_cpu.tolist()
    slots = meta.state_slots.tolist()
    table = meta.block_table.tolist()
    out = []
    for i in range(meta.num_seqs):
        start, end = qsl[i], qsl[i + 1]
        if end - start != seq[i] - ctx[i]:
            raise ValueError(f"sequence {i}: {end - start} new tokens but seq_len {seq[i]} - context_len {ctx[i]}")
        out.append(_Seq(i, start, end, ctx[i], seq[i], slots[i], tuple(table[i])))
    return out


def _check_shape(name: str, tensor: Any, shape: tuple[int | None, ...]) -> int:
    """Raise unless ``tensor`` has ``shape``; a None dimension is the token
    count T and matches anything. Returns the tensor's first dimension."""
    wanted = "[" + ", ".join("T" if d is None else str(d) for d in shape) + "]"
    if not isinstance(tensor, Tensor):
        raise ValueError(f"{name} must be a tensor of shape {wanted}, not {type(tensor).__name__}")
    if tensor.dim() != len(shape) or any(d is not None and d != n for d, n in zip(shape, tensor.shape)):
        raise ValueError(f"{name} must have shape {wanted}, not {list(tensor.shape)}")
    return tensor.shape[0]


def _pool(state: Mapping[str, Tensor], name: str, per_record: tuple[int, ...], kind: str) -> Tensor:
    if name not in state:
        raise ValueError(f"{kind} state needs a pool named {name!r}; got {', '.join(map(repr, state)) or 'none'}")
    pool = state[name]
    if not isinstance(pool, Tensor) or pool.dim() != 1 + len(per_record) or tuple(pool.shape[1:]) != per_record:
        got = list(pool.shape) if isinstance(pool, Tensor) else type(pool).__name__
        raise ValueError(f"{kind} state {name!r} must have shape [num_slots, {', '.join(map(str, per_record))}], not {got}")
    return pool


def _check_slots(seqs: list[_Seq], num_slots: int) -> None:
    seen: set[int] = set()
    for s in seqs:
        if not 0 <= s.slot < num_slots:
            raise ValueError(f"sequence {s.index} has state slot {s.slot}, outside the pool of {num_slots} slots")
        if s.slot in seen:
            raise ValueError(f"state slot {s.slot} is given to two sequences of the same step")
        seen.add(s.slot)


def _conv_weights(name: str, weight: Tensor, bias: Tensor | None, channels: int, width: int, has_bias: bool) -> None:
    _check_shape(f"{name} conv_weight", weight, (channels, width))
    if has_bias:
        if bias is None:
            raise ValueError(f"{name} spec has conv_bias=True but weights.conv_bias is None")
        _check_shape(f"{name} conv_bias", bias, (channels,))
    elif bias is not None:
        raise ValueError(f"{name} spec has conv_bias=False but weights.conv_bias is set; make them agree")


def _causal_conv(inputs: Tensor, prev: Tensor, weight: Tensor, bias: Tensor | None) -> tuple[Tensor, Tensor]:
    """Depthwise causal conv of one sequence's new inputs, all float64.

    inputs [L, C]: this step's conv inputs. prev [C, w - 1]: the inputs before
    them, oldest first. weight [C, w]; bias [C] or None.
    Returns (out [L, C], the new conv state [C, w - 1]).
    """
    width = weight.shape[1]
    # Column j of history is the input at relative time j - (w - 1).
    history = torch.cat([prev, inputs.T], dim=1)
    out = torch.empty_like(inputs)
    for t in range(inputs.shape[0]):
        window = history[:, t: t + width]  # inputs t - (w - 1) ... t, oldest first
        out[t] = (weight * window).sum(dim=1)
        if bias is not None:
            out[t] += bias
    return out, history[:, history.shape[1] - (width - 1):].clone()


def _rms(v: Tensor, eps: float) -> Tensor:
    """v / sqrt(mean(v ** 2) + eps) over the last axis."""
    return v / torch.sqrt((v * v).mean(-1, keepdim=True) + eps)


def _silu(x: Tensor) -> Tensor:
    return x * torch.sigmoid(x)


def _softplus(x: Tensor) -> Tensor:
    """log(1 + exp(x)), exact (no linear threshold), stable for large |x|."""
    return x.clamp(min=0) + torch.log1p(torch.exp(-x.abs()))


def _f64(t: Tensor | None) -> Tensor | None:
    return None if t is None else t.to(F64)


def _load_slot(pool: Tensor, s: _Seq) -> Tensor:
    """The state a sequence starts from: zeros for a fresh sequence, else its slot (float64 copy)."""
    if s.context_len == 0:
        return torch.zeros(pool.shape[1:], dtype=F64, device=pool.device)
    return pool[s.slot].to(F64).clone()


# --------------------------------------------------------------------------- attention


class AttentionOracle(AttentionImpl):
    """Softmax attention over the paged K/V cache, one query and head at a time.

    The step's k, v are first written to ``k_cache``/``v_cache`` at
    ``meta.slot_mapping``; every key and value is then read back from the
    cache through ``meta.block_table`` (so a cache kept in a lower precision
    is seen as such). New token ``j`` of sequence ``i`` sits at absolute
    position ``p = context_lens[i] + j``. Query head ``h`` uses kv head
    ``h // (num_heads // num_kv_heads)``. Logits are ``softmax_scale * q.k``,
    then ``c * tanh(logits / c)`` when ``logits_soft_cap`` is ``c``, then
    softmax over the visible keys:

    * causal: positions ``[lo, p]``, with ``lo = max(0, p - sliding_window + 1)``
      under a sliding window and 0 without;
    * not causal: all ``seq_lens[i]`` positions of the sequence (its cached
      context and every new token of the step).

    (AttentionSpec itself refuses a sliding window on a non-causal layer.)
    """

    def __init__(self, spec: AttentionSpec):
        if not isinstance(spec, AttentionSpec):
            raise ValueError(f"AttentionOracle needs an AttentionSpec, not {type(spec).__name__}")
        self.spec = spec

    def forward(self, q: Tensor, k: Tensor, v: Tensor, state: Mapping[str, Tensor], meta: Any) -> Tensor:
        spec = self.spec
        H, KVH, D = spec.num_heads, spec.num_kv_heads, spec.head_size
        T = _check_shape("q", q, (None, H, D))
        _check_shape("k", k, (T, KVH, D))
        _check_shape("v", v, (T, KVH, D))
        seqs = _sequences(meta, T)
        for name in ("k_cache", "v_cache"):
            if name not in state:
                raise ValueError(f"attention state needs a pool named {name!r}; got {', '.join(map(repr, state)) or 'none'}")
            pool = state[name]
            if pool.dim() != 4 or tuple(pool.shape[1:]) != (meta.block_size, KVH, D):
                raise ValueError(f"attention state {name!r} must have shape [num_blocks, {meta.block_size}, {KVH}, {D}], "
                                 f"not {list(pool.shape)}")
        k_cache, v_cache = state["k_cache"], state["v_cache"]
        num_blocks, block_size = k_cache.shape[0], meta.block_size
        slot_mapping = meta.slot_mapping.tolist()
        if len(slot_mapping) != T:
            raise ValueError(f"slot_mapping has {len(slot_mapping)} entries for {T} tokens")

        # 1. Write this step's keys and values into the cache.
        for t, slot in enumerate(slot_mapping):
            block, offset = divmod(slot, block_size)
            if not 0 <= block < num_blocks:
                raise ValueError(f"token {t} maps to block {block}, outside the pool of {num_blocks} blocks")
            k_cache[block, offset] = k[t].to(k_cache.dtype)
            v_cache[block, offset] = v[t].to(v_cache.dtype)

        out = torch.empty(q.shape, dtype=F64, device=q.device)
        group = H // KVH
        scale = spec.softmax_scale
        cap = spec.logits_soft_cap
        for s in seqs:
            # 2. Read the sequence's keys and values back from the cache, position by position.
            keys = torch.empty((s.seq_len, KVH, D), dtype=F64, device=q.device)
            values = torch.empty_like(keys)
            for pos in range(s.seq_len):
                block_index = pos // block_size
                if block_index >= len(s.blocks):
                    raise ValueError(f"sequence {s.index} has no block for position {pos}")
                block = s.blocks[block_index]
                keys[pos] = k_cache[block, pos % block_size].to(F64)
                values[pos] = v_cache[block, pos % block_size].to(F64)
            # 3. Attend each new token over the keys it may see.
            for j in range(s.end - s.start):
                t = s.start + j
                p = s.context_len + j
                if spec.causal:
                    lo = 0 if spec.sliding_window is None else max(0, p - spec.sliding_window + 1)
                    hi = p + 1
                else:
                    lo, hi = 0, s.seq_len
                for h in range(H):
                    kv = h // group
                    logits = scale * (keys[lo:hi, kv] @ q[t, h].to(F64))  # [hi - lo]
                    if cap is not None:
                        logits = cap * torch.tanh(logits / cap)
                    weights = torch.softmax(logits, dim=0)
                    out[t, h] = weights @ values[lo:hi, kv]
        return out.to(q.dtype)


# --------------------------------------------------------------------------- mamba1


class Mamba1Oracle(Mamba1Impl):
    """Mamba's selective scan, token by token (see ``mixboard.kinds.mamba1``)::

        x  = silu(conv(x))                                  # conv state carried
        dt, B, C = split(x @ x_proj_weight.T, [dt_rank, d_state, d_state])
        dt, B, C = rms(dt) * dt_norm_weight, rms(B) * b_norm_weight, rms(C) * c_norm_weight   # dt_bc_norms only
        dt = softplus(dt @ dt_proj_weight.T + dt_proj_bias)  # [d_inner]
        h  = exp(dt[:, None] * A) * h + (dt * x)[:, None] * B[None, :]   # [d_inner, d_state]
        y  = (h @ C + D * x) * silu(z)

    softplus is exact (no linear region above 20).
    """

    def __init__(self, spec: Mamba1Spec):
        if not isinstance(spec, Mamba1Spec):
            raise ValueError(f"Mamba1Oracle needs a Mamba1Spec, not {type(spec).__name__}")
        self.spec = spec

    def forward(self, x: Tensor, z: Tensor, weights: Mamba1Weights, state: Mapping[str, Tensor], meta: Any) -> Tensor:
        spec = self.spec
        DI, N, R, W = spec.d_inner, spec.d_state, spec.dt_rank, spec.d_conv
        T = _check_shape("x", x, (None, DI))
        _check_shape("z", z, (T, DI))
        _conv_weights("mamba1", weights.conv_weight, weights.conv_bias, DI, W, spec.conv_bias)
        _check_shape("x_proj_weight", weights.x_proj_weight, (R + 2 * N, DI))
        _check_shape("dt_proj_weight", weights.dt_proj_weight, (DI, R))
        _check_shape("dt_proj_bias", weights.dt_proj_bias, (DI,))
        _check_shape("A", weights.A, (DI, N))
        _check_shape("D", weights.D, (DI,))
        norms = (weights.dt_norm_weight, weights.b_norm_weight, weights.c_norm_weight)
        if spec.dt_bc_norms:
            for name, t, width in zip(("dt_norm_weight", "b_norm_weight", "c_norm_weight"), norms, (R, N, N)):
                _check_shape(name, t, (width,))
        elif any(t is not None for t in norms):
            raise ValueError("mamba1: dt/B/C norm weights given but the spec has dt_bc_norms=False")
        conv_pool = _pool(state, "conv", (DI, W - 1), "mamba1")
        ssm_pool = _pool(state, "ssm", (DI, N), "mamba1")
        seqs = _sequences(meta, T)
        _check_slots(seqs, min(conv_pool.shape[0], ssm_pool.shape[0]))

        conv_w, conv_b = weights.conv_weight.to(F64), _f64(weights.conv_bias)
        x_proj, dt_proj, dt_bias = weights.x_proj_weight.to(F64), weights.dt_proj_weight.to(F64), weights.dt_proj_bias.to(F64)
        A, D = weights.A.to(F64), weights.D.to(F64)
        norm_w, eps = [_f64(t) for t in norms], spec.norm_eps
        out = torch.empty((T, DI), dtype=F64, device=x.device)
        for s in seqs:
            conv_state, h = _load_slot(conv_pool, s), _load_slot(ssm_pool, s)
            xs, conv_state = _causal_conv(x[s.start:s.end].to(F64), conv_state, conv_w, conv_b)
            xs = _silu(xs)
            for j, t in enumerate(range(s.start, s.end)):
                xt = xs[j]  # [d_inner]
                proj = x_proj @ xt  # [dt_rank + 2 * d_state]
                dt_low, B, C = proj[:R], proj[R:R + N], proj[R + N:]
                if spec.dt_bc_norms:
                    dt_low, B, C = (_rms(v, eps) * w for v, w in zip((dt_low, B, C), norm_w))
                dt = _softplus(dt_proj @ dt_low + dt_bias)  # [d_inner]
                h = torch.exp(dt[:, None] * A) * h + (dt * xt)[:, None] * B[None, :]
                y = h @ C + D * xt
                out[t] = y * _silu(z[t].to(F64))
            conv_pool[s.slot] = conv_state.to(conv_pool.dtype)
            ssm_pool[s.slot] = h.to(ssm_pool.dtype)
        return out.to(x.dtype)


# --------------------------------------------------------------------------- mamba2


class Mamba2Oracle(Mamba2Impl):
    """Mamba-2's SSD as a plain recurrence, token by token (see ``mixboard.kinds.mamba2``)::

        xBC = silu(conv(xBC))                               # conv state carried
        x, B, C = split(xBC, [d_inner, n_groups * d_state, n_groups * d_state])
        dt  = clamp(softplus(dt + dt_bias), dt_min, dt_max)  # [num_heads]
        for head h of group g = h // (num_heads // n_groups):
            S[h] = exp(dt[h] * A[h]) * S[h] + dt[h] * outer(x[h], B[g])   # [head_dim, d_state]
            y[h] = S[h] @ C[g] + D[h] * x[h]
        if gated_norm:                                      # else y as it is: z and norm_weight unread
            y = y * silu(z)
            y = y / sqrt(mean(y**2) + norm_eps) * norm_weight   # mean over each group of d_inner / n_groups channels

    ``chunk_size`` is ignored: the result does not depend on it. The output
    has the dtype of ``xBC``.
    """

    def __init__(self, spec: Mamba2Spec):
        if not isinstance(spec, Mamba2Spec):
            raise ValueError(f"Mamba2Oracle needs a Mamba2Spec, not {type(spec).__name__}")
        self.spec = spec

    def forward(self, z: Tensor, xBC: Tensor, dt: Tensor, weights: Mamba2Weights,
                state: Mapping[str, Tensor], meta: Any) -> Tensor:
        spec = self.spec
        H, P, N, G, W = spec.num_heads, spec.head_dim, spec.d_state, spec.n_groups, spec.d_conv
        DI, CD = spec.d_inner, spec.conv_dim
        T = _check_shape("xBC", xBC, (None, CD))
        _check_shape("z", z, (T, DI))
        _check_shape("dt", dt, (T, H))
        _conv_weights("mamba2", weights.conv_weight, weights.conv_bias, CD, W, spec.conv_bias)
        _check_shape("dt_bias", weights.dt_bias, (H,))
        _check_shape("A", weights.A, (H,))
        _check_shape("D", weights.D, (H,))
        if spec.gated_norm:
            _check_shape("norm_weight", weights.norm_weight, (DI,))
        conv_pool = _pool(state, "conv", (CD, W - 1), "mamba2")
        ssm_pool = _pool(state, "ssm", (H, P, N), "mamba2")
        seqs = _sequences(meta, T)
        _check_slots(seqs, min(conv_pool.shape[0], ssm_pool.shape[0]))

        conv_w, conv_b = weights.conv_weight.to(F64), _f64(weights.conv_bias)
        dt_bias, A, D = weights.dt_bias.to(F64), weights.A.to(F64), weights.D.to(F64)
        norm_weight = weights.norm_weight.to(F64) if spec.gated_norm else None
        heads_per_group = H // G
        group_size = DI // G
        out = torch.empty((T, DI), dtype=F64, device=xBC.device)
        for s in seqs:
            conv_state, S = _load_slot(conv_pool, s), _load_slot(ssm_pool, s)
            xbc, conv_state = _causal_conv(xBC[s.start:s.end].to(F64), conv_state, conv_w, conv_b)
            xbc = _silu(xbc)
            for j, t in enumerate(range(s.start, s.end)):
                x = xbc[j, :DI].reshape(H, P)
                B = xbc[j, DI:DI + G * N].reshape(G, N)
                C = xbc[j, DI + G * N:].reshape(G, N)
                dt_t = (_softplus(dt[t].to(F64) + dt_bias)).clamp(min=spec.dt_min, max=spec.dt_max)  # [H]
                y = torch.empty((H, P), dtype=F64, device=xBC.device)
                for h in range(H):
                    g = h // heads_per_group
                    S[h] = torch.exp(dt_t[h] * A[h]) * S[h] + dt_t[h] * torch.outer(x[h], B[g])
                    y[h] = S[h] @ C[g] + D[h] * x[h]
                y = y.reshape(DI)
                if spec.gated_norm:
                    y = (y * _silu(z[t].to(F64))).reshape(G, group_size)
                    y = y / torch.sqrt((y * y).mean(dim=1, keepdim=True) + spec.norm_eps)
                    y = y.reshape(DI) * norm_weight
                out[t] = y
            conv_pool[s.slot] = conv_state.to(conv_pool.dtype)
            ssm_pool[s.slot] = S.to(ssm_pool.dtype)
        return out.to(xBC.dtype)


# --------------------------------------------------------------------------- short_conv


class ShortConvOracle(ShortConvImpl):
    """LFM2's gated short conv (see ``mixboard.kinds.short_conv``)::

        y = C * conv(B * x)                                 # conv state carried

    The conv input is ``B * x``, so the conv state stores ``B * x`` values.
    The output has the dtype of ``x``.
    """

    def __init__(self, spec: ShortConvSpec):
        if not isinstance(spec, ShortConvSpec):
            raise ValueError(f"ShortConvOracle needs a ShortConvSpec, not {type(spec).__name__}")
        self.spec = spec

    def forward(self, B: Tensor, C: Tensor, x: Tensor, weights: ShortConvWeights,
                state: Mapping[str, Tensor], meta: Any) -> Tensor:
        spec = self.spec
        HS, W = spec.hidden_size, spec.conv_width
        T = _check_shape("x", x, (None, HS))
        _check_shape("B", B, (T, HS))
        _check_shape("C", C, (T, HS))
        _conv_weights("short_conv", weights.conv_weight, weights.conv_bias, HS, W, spec.conv_bias)
        conv_pool = _pool(state, "conv", (HS, W - 1), "short_conv")
        seqs = _sequences(meta, T)
        _check_slots(seqs, conv_pool.shape[0])

        conv_w, conv_b = weights.conv_weight.to(F64), _f64(weights.conv_bias)
        out = torch.empty((T, HS), dtype=F64, device=x.device)
        for s in seqs:
            bx = B[s.start:s.end].to(F64) * x[s.start:s.end].to(F64)
            conv_out, conv_state = _causal_conv(bx, _load_slot(conv_pool, s), conv_w, conv_b)
            out[s.start:s.end] = C[s.start:s.end].to(F64) * conv_out
            conv_pool[s.slot] = conv_state.to(conv_pool.dtype)
        return out.to(x.dtype)


# --------------------------------------------------------------------------- lookup


ORACLES: dict[str, type] = {
    "attention": AttentionOracle,
    "mamba1": Mamba1Oracle,
    "mamba2": Mamba2Oracle,
    "short_conv": ShortConvOracle,
}


def make_oracle(kind_name: str, spec: Any):
    """The oracle of built-in kind ``kind_name`` for ``spec``:
    ``make_oracle("mamba2", Mamba2Spec(num_heads=4, head_dim=8))``; a dense kind's
    (``op_oracles``) takes its weights with ``load`` before ``forward``."""
    from .op_oracles import OP_ORACLES

    oracles = {**ORACLES, **OP_ORACLES}
    if kind_name not in oracles:
        raise ValueError(f"no oracle for kind {kind_name!r}; the built-in kinds are {', '.join(oracles)}")
    return oracles[kind_name](spec)
