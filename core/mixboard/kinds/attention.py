"""Kind ``attention``: softmax attention over a paged K/V cache.

Boundary: the backend receives q, k, v after projection and rotary embedding
and returns the attention output before ``o_proj``. It owns the paged K/V
cache: it writes this step's k, v at ``meta.slot_mapping`` and attends each
new token over its sequence's cached and new keys.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from ..state import StateSpec
from .base import Kind, MixerImpl, MixerSpec, require

if TYPE_CHECKING:
    from torch import Tensor


@dataclass(frozen=True)
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


class AttentionImpl(MixerImpl):
    @abstractmethod
    def forward(self, q: "Tensor", k: "Tensor", v: "Tensor", state: Mapping[str, "Tensor"], meta: Any) -> "Tensor":
        """q: [T, num_heads, head_size]; k, v: [T, num_kv_heads, head_size] for
        the T new tokens of the step. state: the layer's pools (canonical:
        ``k_cache``, ``v_cache`` of [num_blocks, block_size, num_kv_heads,
        head_size]). meta: what the backend's builder made of the step's
        common metadata. Returns [T, num_heads, head_size]."""


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
)
