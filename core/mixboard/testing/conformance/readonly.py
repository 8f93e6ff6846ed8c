"""Nothing a backend receives may change.

The runner hands one ``CommonBatchMetadata`` to every group's builder, one
builder output to every layer of a group, and a layer's inputs and weights
belong to the model. The kit snapshots what it hands over (tensors cloned,
lists, tuples, dicts and fields copied) and compares afterwards: an edit in
place, or a field rebound, added or removed, fails the case naming the field.

Two things may legitimately appear: a field its class declares with
``functools.cached_property`` (made on first use from the metadata alone,
shared by every layer: ``CommonBatchMetadata.sequence_rows``), which is
then held to what its property makes; and, in a builder's output only,
fields named ``_...``: its private memo and workspace (sdpa's masks and
gather buffers). Those are judged by what they do instead (``runner.py``):
a layer must give what it gives with a fresh meta of its own, and an
output must not change while a later layer runs.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import types
from typing import Any, Iterable, Iterator

import torch

_DEPTH = 6  # metadata is shallow; deeper graphs are compared by identity
_SCALARS = (bool, int, float, complex, str, bytes, type(None), torch.dtype, torch.device)
_OPAQUE = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
           functools.partial)


def same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal values, dtype and shape; a NaN equals a NaN."""
    if a.dtype != b.dtype or a.shape != b.shape or a.device != b.device:
        return False
    if torch.equal(a, b):
        return True
    if not (a.is_floating_point() or a.is_complex()):
        return False
    return bool(torch.equal(a.isnan(), b.isnan())) and bool(torch.equal(a.nan_to_num(), b.nan_to_num()))


def _fields(obj: Any) -> dict[str, Any] | None:
    """An object's named fields, or None for something compared by identity."""
    if isinstance(obj, _OPAQUE) or callable(obj):
        return None
    names = [n for klass in type(obj).__mro__ for n in _slots(klass) if not n.startswith("__")]
    out = {n: getattr(obj, n) for n in names if hasattr(obj, n)}
    if dataclasses.is_dataclass(obj):
        out.update((f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj) if hasattr(obj, f.name))
    if hasattr(obj, "__dict__"):
        out.update(vars(obj))
    return out if (out or hasattr(obj, "__dict__") or names) else None


def _slots(klass: type) -> tuple[str, ...]:
    slots = getattr(klass, "__slots__", ())
    return (slots,) if isinstance(slots, str) else tuple(slots)


def _lazy(obj: Any, name: str) -> bool:
    return isinstance(getattr(type(obj), name, None), functools.cached_property)


def _remade(obj: Any, name: str, value: Any) -> Any:
    """A cached property made again from its object (``value``, the cached one, if that fails)."""
    try:
        return getattr(type(obj), name).func(obj)
    except Exception:  # noqa: BLE001 - a backend's property; its own forward reports its errors
        return value


class Snapshot:
    """A copy of ``root`` to compare it with later. ``private=False`` leaves
    out fields named ``_...``; ``skip`` objects are not looked into (another
    snapshot covers them)."""

    def __init__(self, root: Any, name: str, private: bool = True, skip: Iterable[Any] = ()):
        self.name, self.private = name, private
        self._skip = {id(s) for s in skip}
        self._frozen = self._freeze(root, 0, ())

    def changed(self, root: Any) -> str | None:
        """The fields of ``root`` that differ from the snapshot (the first few), with what happened.
        A tensor two fields share (``seq_lens`` and ``seq_lens_cpu`` on the host) is named under both."""
        found = list(itertools.islice(self._diff(self._frozen, root, self.name), 3))
        return ", ".join(found) or None

    def _keep(self, name: str) -> bool:
        return self.private or not name.startswith("_")

    def _freeze(self, obj: Any, depth: int, path: tuple[int, ...]):
        if id(obj) in self._skip or id(obj) in path:
            return ("skip",)
        if isinstance(obj, torch.Tensor):
            return ("tensor", obj.detach().clone())
        if isinstance(obj, _SCALARS):
            return ("scalar", obj)
        if depth >= _DEPTH:
            return ("same", obj)
        path = (*path, id(obj))
        if isinstance(obj, (list, tuple)):
            return ("seq", type(obj), [self._freeze(v, depth + 1, path) for v in obj])
        if isinstance(obj, dict):
            return ("map", {k: self._freeze(v, depth + 1, path) for k, v in obj.items()})
        fields = _fields(obj)
        if fields is None:
            return ("same", obj)
        return ("object", type(obj), {k: self._freeze(v, depth + 1, path) for k, v in fields.items() if self._keep(k)})

    def _diff(self, frozen, obj: Any, where: str) -> Iterator[str]:
        tag = frozen[0]
        if tag == "tensor":
            if not isinstance(obj, torch.Tensor):
                yield f"{where} (a tensor, now {type(obj).__name__})"
            elif not same_tensor(obj.detach(), frozen[1]):
                yield where
        elif tag == "scalar":
            old = frozen[1]
            nan = isinstance(old, float) and isinstance(obj, float) and math.isnan(old) and math.isnan(obj)
            if not (type(obj) is type(old) and (obj == old or nan)):
                yield f"{where} ({old!r}, now {obj!r})"
        elif tag == "same":
            if obj is not frozen[1]:
                yield f"{where} (replaced)"
        elif tag == "seq":
            if type(obj) is not frozen[1] or len(obj) != len(frozen[2]):
                yield f"{where} (its length or type)"
            else:
                for i, (f, v) in enumerate(zip(frozen[2], obj)):
                    yield from self._diff(f, v, f"{where}[{i}]")
        elif tag == "map":
            if not isinstance(obj, dict) or obj.keys() != frozen[1].keys():
                yield f"{where} (its keys)"
            else:
                for k, f in frozen[1].items():
                    yield from self._diff(f, obj[k], f"{where}[{k!r}]")
        elif tag == "object":
            yield from self._diff_fields(frozen, obj, where)

    def _diff_fields(self, frozen, obj: Any, where: str) -> Iterator[str]:
        old_type, old_fields = frozen[1], frozen[2]
        if type(obj) is not old_type:
            yield f"{where} (a {old_type.__name__}, now {type(obj).__name__})"
            return
        fields = _fields(obj) or {}
        for name, value in fields.items():
            if name in old_fields or not self._keep(name):
                continue
            if _lazy(obj, name):  # made on first use: held to what it is made of (an edit right after is seen)
                old_fields[name] = self._freeze(_remade(obj, name, value), 1, ())
            else:
                yield f"{where}.{name} (added)"
        for name, old in old_fields.items():
            if name not in fields:
                yield f"{where}.{name} (removed)"
            else:
                yield from self._diff(old, fields[name], f"{where}.{name}")


# --------------------------------------------------------------------------- what the runner checks


class Received:
    """What a backend is handed in a step: the common batch metadata (every
    field) and, once built, its builder's output (its public fields)."""

    def __init__(self, common: Any):
        self._common, self._meta = (common, Snapshot(common, "CommonBatchMetadata")), None

    def add_meta(self, meta: Any) -> None:
        self._meta = (meta, Snapshot(meta, "meta", private=False, skip=[self._common[0]]))

    def changed(self, who: str) -> str | None:
        problem = self._common[1].changed(self._common[0])
        if problem:
            return (f"{who} changed the common batch metadata: {problem}; the runner hands it to every group's "
                    f"builder, which may only read it")
        problem = self._meta and self._meta[1].changed(self._meta[0])
        if problem:
            return (f"{who} changed its builder's output: {problem}; every layer of the group shares it (keep "
                    f"per-layer data in the impl; name a private memo or workspace '_...')")
        return None


def keep_inputs(given: dict) -> dict:
    """Copies of the step's inputs and, for a strided view, of the buffer it is a view of."""
    return {k: (v.clone(), None if v._base is None else v._base.clone()) for k, v in given.items()}


def changed_inputs(given: dict, kept: dict, weights: dict, reference: Any) -> str | None:
    """The step's inputs and the layer's weights are the caller's: a backend reads them only.
    ``kept`` is what ``keep_inputs`` made; ``reference`` holds the weights' values on the host
    (the oracle's copy)."""
    for name, (before, buffer) in kept.items():
        if not same_tensor(given[name], before):
            return f"the backend changed its input {name!r} in place"
        if buffer is not None and not same_tensor(given[name]._base, buffer):
            # a fused projection's other slices live there
            return f"the backend wrote outside its input {name!r}, into the rest of the buffer it is a view of"
    for name, value in weights.items():
        if isinstance(value, torch.Tensor) and not same_tensor(value.cpu(), getattr(reference, name)):
            return f"the backend changed the layer's weight {name!r} in place"
    return None


def aliased(out: Any, named: dict[str, Any]) -> str | None:
    """The output is the caller's to keep: it may share no storage with what it was given."""
    if not isinstance(out, torch.Tensor) or out.numel() == 0:
        return None
    mine = out.untyped_storage().data_ptr()
    for name, t in named.items():
        if isinstance(t, torch.Tensor) and t.numel() and t.untyped_storage().data_ptr() == mine:
            return f"the output shares memory with {name}; return a tensor of its own"
    return None


def leaked(out: Any, alone: Any, own_meta: Any, shared_meta: Any, tol: float) -> str | None:
    """A layer sharing the step's builder output must give what it gives with
    one of its own (``alone``, built for it from a fresh common metadata)."""
    if not (isinstance(out, torch.Tensor) and isinstance(alone, torch.Tensor)) or out.shape != alone.shape:
        return None  # the comparison with the oracle names it
    out, alone = out.detach().double(), alone.double()
    diff = (out - alone).abs().nan_to_num(nan=math.inf).masked_fill(out.isnan() & alone.isnan(), 0)
    err = float(diff.max()) if diff.numel() else 0.0
    if err <= tol:
        return None
    differs = Snapshot(own_meta, "meta").changed(shared_meta)
    trace = f"; the shared one differs from its own in {differs}" if differs else ""
    return (f"its output with the builder output the layers share differs by {err:.3g} from its output with one "
            f"of its own: an earlier layer left a trace in the shared one{trace}")
