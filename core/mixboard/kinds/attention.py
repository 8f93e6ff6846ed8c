"""Kind ``attention``: softmax attention over a paged K/V cache.

Boundary: the backend receives q, k, v after projection and rotary embedding
and returns the attention output before ``o_proj``. It owns the paged K/V
cache: it writes this step's k, v at ``meta.slot_mapping`` and attends each
new token over its sequence's cached and new keys.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, Any, Mapping

from ..state import StateSpec
from .base import Kind, MixerImpl, MixerSpec, require, spec_class

if TYPE_CHECKING:
    from torch import Tensor


@spec_class
class AttentionSpec(MixerSpec):
    """Static facts of one attention layer.

    num_heads: query heads (default 8). num_kv_heads: key/value heads; a
    divisor of num_heads (GQA/MQA; default 8). head_size: 64. scale: the
    softmax scale, None means 1/sqrt(head_size). causal: True. sliding_window:
    None (unlimited) or the number of most recent keys a query sees, itself
    included. logits_soft_cap: None, or c for c * tanh(logits / c).
    """

    num_heads: int = 8
    num_kv_heads: int = 8
    head_size: int = 64
    scale: float | None = None
    causal: bool = True
    sliding_window: int | None = None
    logits_soft_cap: float | None = None

    def validate(self) -> None:
        require(self.num_heads > 0 and self.num_kv_heads > 0 and self.head_size > 0,
                "num_heads, num_kv_heads and head_size must be positive")
        require(self.num_heads % self.num_kv_heads == 0,
                f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})")
        require(self.sliding_window is None or self.sliding_window > 0, "sliding_window must be positive or none")
        require(self.causal or self.sliding_window is None,
                "sliding_window is defined for causal attention only (the most recent keys); drop it or set causal")
        require(self.logits_soft_cap is None or self.logits_soft_cap > 0, "logits_soft_cap must be positive or none")
        require(self.scale is None or self.scale > 0, "scale must be positive or none")

    @property
    def softmax_scale(self) -> float:
        return self.scale if self.scale is not None else self.head_size ** -0.5

    def canonical(self) -> dict:
        """Scale None and scale 1/sqrt(head_size) are one spec (the runner leaves it None, vLLM sets it)."""
        return {**self.to_dict(), "scale": self.softmax_scale}


class AttentionImpl(MixerImpl):
    """The impl interface of kind ``attention``: ``forward(q, k, v, state, meta)``.

    The rules every kind shares (lifecycle, strides of inputs and pools,
    what may change) are ``help(mixboard.kinds.MixerImpl)``; the step's
    rows, positions, slots and block table are
    ``help(mixboard.CommonBatchMetadata)``.
    H = num_heads, KVH = num_kv_heads, D = head_size, T = num_tokens.

    q: [T, H, D]. The step's queries, after projection and rotary embedding.
    k, v: [T, KVH, D]. The step's keys and values, likewise.
    state (canonical, 'paged'): ``k_cache`` and ``v_cache``, each
        [num_blocks, block_size, KVH, D] in the layer's dtype. Position p of
        sequence i is at ``[block_table[i, p // block_size], p % block_size]``.
        Each block is contiguous; blocks are ``stride(0)`` apart, which may
        exceed a block (both pools may be slices of one page per block).
    meta: the builder's output for the step.
    Returns: [T, H, D], the attention output before ``o_proj``.

    What it computes. First this step's k, v are stored in the cache: row r
    in block ``slot_mapping[r] // block_size`` at offset
    ``slot_mapping[r] % block_size`` (``mixboard.ops.paged.write_kv`` does
    it for any pools the contract allows; a flat view of a pool, as
    [num_blocks * block_size, KVH, D], exists only where its blocks lie back
    to back). (Earlier positions of a sequence are already there from earlier
    steps; a sequence's positions below ``context_lens[i]`` must not be
    rewritten.) Then each new token attends
    over the keys of its own sequence. Row r, new token j of sequence i,
    sits at position p = context_lens[i] + j and sees:

    * causal: positions lo..p, with lo = max(0, p - sliding_window + 1)
      under a sliding window, else 0 (a window counts the query itself);
    * not causal: all seq_lens[i] positions, including later new tokens of
      the step (a sliding window is refused on non-causal layers).

    Query head h uses kv head h // (H // KVH) (GQA; MQA when KVH is 1).
    The logits are ``softmax_scale * q . k`` (``spec.softmax_scale``: scale,
    or 1/sqrt(D) when scale is None), then ``c * tanh(logits / c)`` when
    logits_soft_cap is c, then a softmax over the visible positions; the
    output is the softmax-weighted sum of their values. Keys read back from
    the cache are in the cache's dtype (so a cache kept in a lower precision
    is seen as such).

    Read only positions below seq_lens[i]: a sequence's last block holds
    stale values past them, and a fresh sequence's (context_lens 0) blocks
    hold them everywhere until this step writes its tokens. Decodes need no
    special path: a decode is a sequence with one new token, at position
    seq_lens[i] - 1, that sees every earlier position (or the window's).
    The oracle, ``mixboard.testing.AttentionOracle``, is the definition.
    """

    @abstractmethod
    def forward(self, q: "Tensor", k: "Tensor", v: "Tensor", state: Mapping[str, "Tensor"], meta: Any) -> "Tensor":
        """Store k, v at meta's slot_mapping, attend; return [T, num_heads, head_size] (see the class docstring)."""


def attention_state(spec: AttentionSpec) -> StateSpec:
    token = (spec.num_kv_heads, spec.head_size)
    return StateSpec.paged(k_cache=(token, spec.dtype), v_cache=(token, spec.dtype))


ATTENTION = Kind(
    name="attention",
    spec=AttentionSpec,
    impl=AttentionImpl,
    state_spec=attention_state,
    description="softmax attention over a paged K/V cache",
    install_hint="pip install mixboard-sdpa",
    conformance="mixboard.testing.conformance.kinds:ATTENTION",
    row_inputs={"forward": 3},
)
