"""A dense kind, described for the kit.

A dense kind (``mixboard.kinds.OpImpl``) keeps no state and gets no step
metadata: the kit loads a layer's weights once, then calls the impl's
methods on rows of inputs and compares each result with the oracle's. What
differs from kind to kind is what it is called with and what it may do to
its inputs; an :class:`OpAdapter` says that, one :class:`OpCall` per way a
runner calls the impl. The built-in dense kinds' adapters are in
``op_kinds.py``; a plugin's dense kind declares its own the same way
(``Kind(conformance="module:NAME")``) and gets a suite from
``conformance_suite``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch


def _always(spec: Any) -> bool:
    return True


@dataclass(frozen=True)
class OpCall:
    """One way the impl is called.

    name: how messages name it (``forward(x, residual=None)``). method: the
    impl's method. draw: ``(spec, rows, gen, step) -> {argument: tensor or
    None}`` in the method's argument order, each tensor on the host in the
    dtype the caller passes (the layer's, unless the kind says otherwise);
    ``step`` counts the case's steps from 0. outputs: names of what it
    returns: one name, a tensor; several, a tuple of that many.

    handed: arguments the kind hands over: the impl may write them.
    may_share: output -> arguments whose memory it may share (rms_norm's
    ``s`` may be ``residual`` itself); any other sharing with an argument, and
    any with a weight, fails. shared: arguments drawn once a step and passed,
    the same object, to every layer (rotary's ``positions``). fused:
    arguments that the strided layout makes views of one buffer (rotary's q
    and k in a fused qkv product's output). applies: whether a spec calls it
    (the LM head only on tied tables). exact: outputs compared for equality
    (indices), not within the tolerance.
    """

    name: str
    draw: Callable[[Any, int, torch.Generator, int], Mapping[str, torch.Tensor | None]]
    method: str = "forward"
    outputs: tuple[str, ...] = ("out",)
    handed: tuple[str, ...] = ()
    may_share: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    shared: tuple[str, ...] = ()
    fused: tuple[str, ...] = ()
    applies: Callable[[Any], bool] = _always
    exact: bool = False


@dataclass(frozen=True)
class OpAdapter:
    """A dense kind for the kit: its oracle, its weights, its calls, its shapes.

    kind: the kind's name. base: spec fields of most cases (small, so the
    oracle stays fast). calls: the :class:`OpCall` s a layer gets, in order,
    each step. oracle: ``spec -> impl``, the reference (loaded with the same
    weights as the backend). weights: ``(spec, generator) -> weights record``
    in float64 (the kit casts each tensor to the layer's dtype), or None for
    a kind without weights (``load`` is then never called). shapes: ``(id,
    fields)`` pairs over ``base``, one quick case each (a contiguous step of
    one row, then a strided one of 37; keep real widths few). long_shapes:
    the same over ``base`` for the thorough mode, with a step of
    ``long_rows`` rows (512).
    neighbour: fields the second layer of the ``interleaved`` case changes,
    so that two impls of different specs run turn about (default: the same
    spec, other weights).
    """

    kind: str
    base: Mapping[str, Any]
    calls: tuple[OpCall, ...]
    oracle: Callable[[Any], Any]
    weights: Callable[[Any, torch.Generator], Any] | None = None
    shapes: tuple[tuple[str, Mapping[str, Any]], ...] = field(default_factory=tuple)
    long_shapes: tuple[tuple[str, Mapping[str, Any]], ...] = field(default_factory=tuple)
    neighbour: Mapping[str, Any] = field(default_factory=dict)
    long_rows: int = 512

    def calls_of(self, spec: Any) -> tuple[OpCall, ...]:
        return tuple(c for c in self.calls if c.applies(spec))
