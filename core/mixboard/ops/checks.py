"""Validation of what reaches a backend, with errors that name the layer."""

from __future__ import annotations

from typing import Any, Sequence

import torch

from ..errors import MixboardError


class BackendInputError(MixboardError, ValueError):
    """A backend was handed something of the wrong shape, dtype or device."""


def build_impl(backend: type, spec: Any, env: Any, layer_name: str) -> Any:
    """``backend.make_impl(spec, env)``, named after the layer it serves."""
    impl = backend.make_impl(spec, env)
    impl.layer_name = layer_name
    return impl


def expect(layer: str, what: str, tensor: Any, shape: Sequence[int | None], dtype: torch.dtype | None = None,
           device: torch.device | None = None) -> None:
    """Raise BackendInputError unless ``tensor`` has ``shape`` (None matches
    any size), ``dtype`` and ``device`` (each when given). Every layer runs
    these on every step, so the passing case is kept to a few comparisons."""
    if not isinstance(tensor, torch.Tensor):
        raise BackendInputError(f"{layer}: {what} must be a tensor, got {type(tensor).__name__}")
    actual = tensor.shape
    if len(actual) != len(shape) or any(e is not None and e != s for e, s in zip(shape, actual)):
        wanted = "[" + ", ".join("*" if e is None else str(e) for e in shape) + "]"
        raise BackendInputError(f"{layer}: {what} must have shape {wanted}, got {list(actual)}")
    if dtype is not None and tensor.dtype != dtype:
        raise BackendInputError(f"{layer}: {what} must be {dtype}, got {tensor.dtype}")
    if device is not None:
        kind = device.type if isinstance(device, torch.device) else torch.device(device).type
        if tensor.device.type != kind:
            raise BackendInputError(f"{layer}: {what} must be on {device}, got {tensor.device}")


def expect_state(layer: str, state: Any, names: Sequence[str]) -> None:
    missing = [n for n in names if n not in state]
    if missing:
        raise BackendInputError(f"{layer}: state is missing {', '.join(missing)} (has {', '.join(state) or 'nothing'})")


def repeated(values) -> tuple[int, ...]:
    """Values that occur more than once, in the order their repeat appears
    (every sequence of a step must own its state slot)."""
    seen: set[int] = set()
    repeats: dict[int, None] = {}
    for v in values:
        if v in seen:
            repeats[v] = None
        seen.add(v)
    return tuple(repeats)


def slot_bounds(slots: Sequence[int]) -> tuple[int, int]:
    """(smallest, largest) of a step's slots, worked out once per step by a
    builder so that each layer's ``expect_slots`` compares two ints."""
    return (min(slots), max(slots)) if len(slots) else (0, -1)


def expect_slots(layer: str, slots_cpu: torch.Tensor, num_slots: int, bounds: tuple[int, int] | None = None) -> None:
    """Every sequence's slot must exist in the pool (checked on the host copy,
    or on its precomputed ``bounds``)."""
    if bounds is None:
        bounds = slot_bounds(slots_cpu.tolist())
    if bounds[0] < 0 or bounds[1] >= num_slots:
        raise BackendInputError(f"{layer}: state slot {slots_cpu.tolist()} out of range: the pool has {num_slots} slots")
