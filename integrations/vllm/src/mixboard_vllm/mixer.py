"""What the plan asks of a vLLM layer that runs on mixboard: its kind and its spec.

A layer mixboard runs answers for itself: a replaced slot-state layer (layers/base.py) carries
``mixboard_kind`` and ``mixboard_spec()``; vLLM's Attention layer does it through its impl
(attention.py's MixboardAttentionImpl: ``mixboard_kind`` and ``mixboard_spec(name, layer)``).
The plan reads only these names, so it needs neither module, and both can use the plan.
Imports nothing of the integration's.
"""

from __future__ import annotations

from typing import Any


def runs_on_mixboard(layer) -> bool:
    """A replaced slot-state layer, or an attention layer built on the integration's backend."""
    return _kind(layer) is not None or _kind(getattr(layer, "impl", None)) is not None


def kind_and_spec(name: str, layer) -> tuple[str, Any] | None:
    """(kind, spec) of a layer mixboard runs; None for one vLLM would run itself."""
    kind = _kind(layer)
    if kind is not None:
        return kind, layer.mixboard_spec()
    impl = getattr(layer, "impl", None)
    kind = _kind(impl)
    if kind is not None:
        return kind, impl.mixboard_spec(name, layer)
    return None


def _kind(obj) -> str | None:
    kind = getattr(type(obj), "mixboard_kind", None)  # the class's: a vLLM layer's own attributes never answer
    return kind if isinstance(kind, str) else None
