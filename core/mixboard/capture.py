"""How far a backend's forward may be captured in a graph, and refilling a
recorded step's metadata so that the graph can be replayed.

An engine may record a step's forward once (a CUDA graph) and replay it for
later steps: the kernels run again on the same tensors, into which the new
step's values were copied first. Python does not run at replay, so whatever
a forward read outside those tensors (an int of the metadata, a tuple of
block ids, a value it kept) keeps the recorded step's value. A backend
declares how far that is safe (``Backend.capture``), weakest first:

``"never"`` (the default)
    the forward runs eagerly, every step.
``"uniform_decode"``
    a forward recorded for a step in which every sequence is a decode (one
    new token each, ``num_decodes == num_seqs``) may be replayed for any
    other such step with as many sequences, once the new step's metadata
    has been copied into the recorded step's (``refill``).
``"any"``
    the same for any step of as many tokens and sequences
    (``num_tokens``, ``num_seqs``), decodes and prefills mixed.

The conformance kit checks a declaration (docs/plugins.md, "Graph
capture"). An engine captures only what the weakest backend of its plan
allows (``weakest``).

Importing this module does not import torch.
"""

from __future__ import annotations

import dataclasses
import functools
import types
from typing import Any, Iterable

NEVER, UNIFORM_DECODE, ANY = "never", "uniform_decode", "any"
LEVELS = (NEVER, UNIFORM_DECODE, ANY)  # weakest first: each promises what the one before it does
_RANK = {level: i for i, level in enumerate(LEVELS)}
PROMISES = {  # each level in a few words (`mixboard backends NAME` shows it)
    NEVER: "forward runs eagerly every step",
    UNIFORM_DECODE: "forward may be replayed from a graph for any step of decodes of as many sequences",
    ANY: "forward may be replayed from a graph for any step of as many tokens and sequences",
}


def _unknown(level: Any) -> str:
    from .errors import did_you_mean

    hint = did_you_mean(level, LEVELS) if isinstance(level, str) else ""
    return f"capture must be one of {', '.join(LEVELS)}, not {level!r}{hint}"


def weakest(levels: Iterable[str]) -> str:
    """The weakest of ``levels``: how far a graph running all of those
    backends may be captured. ``"any"`` for no levels (nothing limits it).
    An unknown level is a ValueError naming the valid ones."""
    found = ANY
    for level in levels:
        if level not in _RANK:
            raise ValueError(_unknown(level))
        if _RANK[level] < _RANK[found]:
            found = level
    return found


def capture_problem(backend: type) -> str | None:
    """Why ``backend.capture`` is not a valid declaration (the plugin loader's check), or None."""
    level = getattr(backend, "capture", NEVER)
    if isinstance(level, str) and level in _RANK:
        return None
    return f"backend {backend.name!r}: {_unknown(level)} (how far its forward may be captured in a graph)"


# --------------------------------------------------------------------------- refilling persistent metadata

_DEPTH = 8  # builder outputs are shallow; deeper is left alone
_OPAQUE = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
           functools.partial)


def refill(recorded: Any, new: Any) -> list[str]:
    """Copy, in place, every tensor reachable from ``new`` into the tensor at
    the same place in ``recorded``; both are what a backend's builder
    returned (its ``meta``), for the recorded step and for the new one.

    Reachable means: through tuples, lists and dicts, and the public fields
    of objects (dataclass fields, ``__slots__``, ``__dict__``). Fields named
    ``_...`` are the backend's memo or workspace and are not touched, nor
    are values a class makes on first use (``functools.cached_property``):
    those keep what the recorded step made, as a graph keeps them, so a
    backend that may be captured makes what its forward needs in the
    builder. Values that hold no tensor (ints, None, tuples of ints, objects
    of ints) are not compared, whatever their form: a graph keeps the
    recorded ones, which is what the conformance kit checks a forward never
    depends on.

    Returns the differences that make a replay impossible, one line each
    ("meta.block_table: shape [3, 4] recorded, [3, 5] now"): a tensor of
    another shape, dtype or device, a tensor where the other has none, and
    where either side holds a tensor, a tuple of another length, another
    type, other keys or fields. When there are any, nothing is copied.
    """
    import torch

    walk = _Walk(torch.Tensor)
    walk.match(recorded, new, "meta", 0)
    if walk.problems:
        return walk.problems
    # a builder run under inference mode makes inference tensors, which can be written only there
    with torch.inference_mode():
        for old, fresh in walk.pairs:
            if old is not fresh:
                old.copy_(fresh)
    return []


class _Walk:
    """Both builder outputs side by side: the tensor pairs to copy, or what stands in the way."""

    def __init__(self, tensor: type):
        self.tensor = tensor  # torch.Tensor, imported by the caller
        self.pairs: list[tuple[Any, Any]] = []
        self.problems: list[str] = []
        self.seen: set[tuple[int, int]] = set()

    def match(self, old: Any, new: Any, where: str, depth: int) -> None:
        tensor = self.tensor
        if isinstance(old, tensor) or isinstance(new, tensor):
            if not (isinstance(old, tensor) and isinstance(new, tensor)):
                self.problems.append(f"{where}: {_what(old, tensor)} recorded, {_what(new, tensor)} now")
            elif old.shape != new.shape:
                self.problems.append(f"{where}: shape {list(old.shape)} recorded, {list(new.shape)} now")
            elif old.dtype != new.dtype:
                self.problems.append(f"{where}: {old.dtype} recorded, {new.dtype} now")
            elif old.device != new.device:
                self.problems.append(f"{where}: on {old.device} recorded, on {new.device} now")
            else:
                self.pairs.append((old, new))
            return
        key = (id(old), id(new))
        if depth >= _DEPTH or key in self.seen:
            return
        self.seen.add(key)
        if isinstance(old, (list, tuple)) or isinstance(new, (list, tuple)):
            if type(old) is not type(new) or len(old) != len(new):
                return self.differ(old, new, where)
            for i, (a, b) in enumerate(zip(old, new)):
                self.match(a, b, f"{where}[{i}]", depth + 1)
            return
        if isinstance(old, dict) or isinstance(new, dict):
            if not (isinstance(old, dict) and isinstance(new, dict)) or old.keys() != new.keys():
                return self.differ(old, new, where)
            for k in old:
                self.match(old[k], new[k], f"{where}[{k!r}]", depth + 1)
            return
        old_fields, new_fields = _fields(old), _fields(new)
        if old_fields is None and new_fields is None:
            return  # plain values: a graph keeps the recorded ones
        if type(old) is not type(new) or old_fields is None or new_fields is None:
            return self.differ(old, new, where)
        if old_fields.keys() != new_fields.keys() and (_holds_tensor(old, tensor) or _holds_tensor(new, tensor)):
            only_old = sorted(old_fields.keys() - new_fields.keys())
            only_new = sorted(new_fields.keys() - old_fields.keys())
            detail = "; ".join(part for part in (only_old and f"only recorded: {', '.join(only_old)}",
                                                 only_new and f"only now: {', '.join(only_new)}") if part)
            self.problems.append(f"{where}: its fields differ ({detail})")
            return
        for name, value in old_fields.items():
            if name in new_fields:
                self.match(value, new_fields[name], f"{where}.{name}", depth + 1)

    def differ(self, old: Any, new: Any, where: str) -> None:
        """Two values of another form: a difference where either holds a tensor (a graph keeps the
        recorded plain values, whatever their form)."""
        if _holds_tensor(old, self.tensor) or _holds_tensor(new, self.tensor):
            self.problems.append(f"{where}: {_what(old, self.tensor)} recorded, {_what(new, self.tensor)} now")


def _holds_tensor(value: Any, tensor: type, depth: int = 0) -> bool:
    if isinstance(value, tensor):
        return True
    if depth >= _DEPTH:
        return False
    if isinstance(value, (list, tuple)):
        items = value
    elif isinstance(value, dict):
        items = value.values()
    else:
        items = (_fields(value) or {}).values()
    return any(_holds_tensor(v, tensor, depth + 1) for v in items)


def _fields(obj: Any) -> dict[str, Any] | None:
    """An object's public fields, or None for a plain value (or something left alone)."""
    if isinstance(obj, _OPAQUE) or callable(obj):
        return None
    cls = type(obj)
    names = [n for klass in cls.__mro__ for n in _slots(klass)]
    if dataclasses.is_dataclass(obj):
        names += [f.name for f in dataclasses.fields(obj)]
    names += list(getattr(obj, "__dict__", ()))
    if not names and not hasattr(obj, "__dict__"):
        return None
    return {n: getattr(obj, n) for n in dict.fromkeys(names)
            if not n.startswith("_") and not isinstance(getattr(cls, n, None), functools.cached_property)
            and hasattr(obj, n)}


def _slots(klass: type) -> tuple[str, ...]:
    slots = getattr(klass, "__slots__", ())
    return (slots,) if isinstance(slots, str) else tuple(slots)


def _what(value: Any, tensor: type) -> str:
    if isinstance(value, tensor):
        return f"a tensor {list(value.shape)}"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)}"
    if isinstance(value, dict):
        return f"a dict with keys {', '.join(map(repr, value)) or 'none'}"
    if value is None:
        return "None"
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"
