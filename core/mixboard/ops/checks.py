"""Validation of what reaches a backend, with errors that name the layer."""

from __future__ import annotations

import inspect
import math
from functools import lru_cache
from typing import Any, Sequence

import torch

from ..errors import MixboardError
from ..options import OptionValues, defaults


class BackendInputError(MixboardError, ValueError):
    """A backend was handed something of the wrong shape, dtype or device."""


def build_impl(backend: type, spec: Any, env: Any, layer_name: str, options: Any = None) -> Any:
    """``backend.make_impl(spec, env)``, named after the layer it serves. A backend that
    declares options gets ``options`` (the plan's values for it; None: its defaults)."""
    impl = backend.make_impl(spec, env, **_options_for(backend, backend.make_impl, options))
    impl.layer_name = layer_name
    return impl


def build_builder(backend: type, spec: Any, env: Any, options: Any = None) -> Any:
    """``backend.builder(spec, env)``, with ``options`` as ``build_impl`` passes them."""
    return backend.builder(spec, env, **_options_for(backend, backend.builder, options))


def _options_for(backend: type, method: Any, options: Any) -> dict:
    """The keyword arguments that carry options: none for a backend that declares none (its
    make_impl and builder keep the signature they always had). A subclass that inherits options
    but overrides the method without taking them (calling ``super()`` without them, which then
    sees the defaults) is called without them while every value is its default; a value set
    otherwise could not reach it, which is an error, never a silent default."""
    if not getattr(backend, "options", ()):
        if options:
            raise MixboardError(f"backend {backend.name!r} declares no options, but was given {dict(options)}")
        return {}
    if not isinstance(options, OptionValues):  # None, or a partial mapping: the rest at their defaults
        options = OptionValues({**defaults(backend), **(options or {})})
    if _takes_options(getattr(method, "__func__", method)):
        return {"options": options}
    changed = {k: v for k, v in options.items() if v != defaults(backend)[k]}
    if changed:
        raise MixboardError(f"backend {backend.name!r} is given options {changed}, but its {method.__name__} does "
                            f"not take `options` (a subclass that overrides {method.__name__} must accept options "
                            f"and pass them on)")
    return {}


@lru_cache(maxsize=None)
def _takes_options(function: Any) -> bool:
    params = inspect.signature(function).parameters.values()
    return any(p.name == "options" or p.kind is p.VAR_KEYWORD for p in params)


def expect(layer: str, what: str, tensor: Any, shape: Sequence[int | None], dtype: torch.dtype | None = None,
           device: torch.device | None = None) -> None:
    """Raise BackendInputError unless ``tensor`` has ``shape`` (None matches
    any size), ``dtype`` and ``device`` (each when given; a device with an
    index, such as another tensor's, must match with it). Every layer runs
    these on every step, so the passing case is kept to a few comparisons."""
    if not isinstance(tensor, torch.Tensor):
        raise BackendInputError(f"{layer}: {what} must be a tensor, got {type(tensor).__name__}")
    actual = tensor.shape
    fits = len(actual) == len(shape)
    if fits:
        for e, s in zip(shape, actual):  # a loop, not any(genexpr): no generator frame per dimension
            if e is not None and e != s:
                fits = False
                break
    if not fits:
        wanted = "[" + ", ".join("*" if e is None else str(e) for e in shape) + "]"
        raise BackendInputError(f"{layer}: {what} must have shape {wanted}, got {list(actual)}")
    if dtype is not None and tensor.dtype != dtype:
        raise BackendInputError(f"{layer}: {what} must be {dtype}, got {tensor.dtype}")
    if device is not None and tensor.device != device:
        # a device with an index (another tensor's: cuda:0) must match whole, or cuda:1 would pass;
        # one named without an index ("cuda") asks only for the type
        want = device if isinstance(device, torch.device) else torch.device(device)
        if want.index is not None or tensor.device.type != want.type:
            raise BackendInputError(f"{layer}: {what} must be on {device}, got {tensor.device}")


def record_stride(pool: torch.Tensor, record: int | None = None) -> int | None:
    """Elements from one record of ``pool`` (``[num_records, ...]``) to the
    next, when the pool keeps the state contract: each record contiguous, and
    ``stride(0)`` at least the record's size (records may sit in larger
    pages, apart by padding that is not the pool's). None otherwise.

    A C kernel addresses record ``i`` at ``data_ptr + i * record_stride``,
    never at ``i * record_size``. ``record``: the record's size in elements,
    where the caller knows it from its spec and has checked the pool's shape;
    a contiguous pool, the common case, then costs one call (every layer asks
    on every step). A pool of one record gets the record's size: torch
    reports any stride(0) for a dimension of 1."""
    if record is not None and pool.is_contiguous():  # records back to back
        return record
    shape, strides = pool.shape, pool.stride()  # read once: inside an engine this path runs every layer
    if not shape:
        return None
    size = 1
    for i in range(len(shape) - 1, 0, -1):
        if shape[i] != 1 and strides[i] != size:  # a record's own elements are not back to back
            return None
        size *= shape[i]
    if shape[0] <= 1:
        return size
    return strides[0] if strides[0] >= size else None  # less: records would overlap


def expect_pool(layer: str, what: str, pool: torch.Tensor) -> None:
    """Raise BackendInputError unless ``pool`` keeps the state contract (see
    ``record_stride``). A contiguous pool costs one call."""
    if pool.is_contiguous() or record_stride(pool) is not None:
        return
    record = list(pool.shape[1:])
    raise BackendInputError(f"{layer}: {what} must be [num_records, {', '.join(map(str, record))}] with each record "
                            f"contiguous and records at least one record apart (stride(0) >= {math.prod(record)}), "
                            f"got strides {list(pool.stride())}")


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
