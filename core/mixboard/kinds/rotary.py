"""Kind ``rotary``: rotary position embedding of q and k.

One op serves every attention layer of a model (they share the table), so
a backend can look a step's rows up once and reuse them layer after layer.
"""

from __future__ import annotations

import json
from abc import abstractmethod
from typing import TYPE_CHECKING

from .base import Kind, MixerSpec, require, spec_class
from .op import OpImpl, no_state

if TYPE_CHECKING:
    from torch import Tensor

SCALINGS = ("default", "linear", "llama3")


@spec_class
class RotarySpec(MixerSpec):
    """head_size: 64. rotary_dim: the channels rotated, the first of each
    head (None: all). theta: the base, 10000.0. scaling: None, or the
    checkpoint's rope_scaling as compact JSON (types default, linear, llama3;
    ``rotary_scaling`` makes it from the dict)."""

    head_size: int = 64
    rotary_dim: int | None = None
    theta: float = 10000.0
    scaling: str | None = None

    def validate(self) -> None:
        require(self.head_size > 0, "head_size must be positive")
        dim = self.dim
        require(0 < dim <= self.head_size and dim % 2 == 0,
                f"rotary_dim must be even and at most head_size ({self.head_size}), not {dim}")
        require(self.theta > 0, "theta must be positive")
        if self.scaling is not None:
            try:
                kind = self.scaling_dict.get("rope_type", self.scaling_dict.get("type", "default"))
            except (ValueError, AttributeError):
                raise ValueError(f"scaling must be a JSON object (the checkpoint's rope_scaling), not "
                                 f"{self.scaling!r}") from None
            require(kind in SCALINGS, f"rope scaling type {kind!r} is not supported (supported: {', '.join(SCALINGS)})")

    @property
    def dim(self) -> int:
        return self.rotary_dim or self.head_size

    @property
    def scaling_dict(self) -> dict:
        return json.loads(self.scaling) if self.scaling else {}


def rotary_scaling(scaling: dict | None) -> str | None:
    """A rope_scaling dict as RotarySpec keeps it: compact JSON, keys sorted (equal dicts, equal specs)."""
    return json.dumps(scaling, sort_keys=True, separators=(",", ":")) if scaling else None


class RotaryImpl(OpImpl):
    """The impl interface of kind ``rotary``: ``forward(positions, q, k)``.

    positions: int64 [T], each row's position in its sequence.
    q, k: [T, Hq, D] and [T, Hk, D], D = head_size, in the layer's dtype,
    channels contiguous (they may be views of one buffer, the fused qkv output).
    The caller hands q and k over: the impl may rotate them in place.
    The caller makes a new positions tensor for each step and never
    writes it: an impl may reuse what it derived from the same positions
    object (the step's rows of its table) across calls, layer after layer.

    Returns (q, k) rotated on the first ``rotary_dim`` channels of each
    head, rotate-half convention (Llama's): with f = inv_freq(spec)
    (``mixboard.ops.rope.inv_freq``), angle[p, i] = p * f[i] for i < dim / 2,

        x1, x2 = x[..., :dim/2], x[..., dim/2:dim]
        out = (x1 * cos - x2 * sin, x2 * cos + x1 * sin), the rest unchanged.

    The oracle, ``mixboard.testing.RotaryOracle``, is the definition.
    """

    @abstractmethod
    def forward(self, positions: "Tensor", q: "Tensor", k: "Tensor") -> "tuple[Tensor, Tensor]":
        """(q, k) rotated by position; see the class docstring."""


ROTARY = Kind(
    name="rotary",
    spec=RotarySpec,
    impl=RotaryImpl,
    state_spec=no_state,
    description="rotary position embedding of q and k (rotate-half)",
    install_hint="rotary_torch ships with mixboard itself; reinstall mixboard",
    conformance="mixboard.testing.conformance.op_kinds:ROTARY",
    row_inputs={"forward": 3},
)
