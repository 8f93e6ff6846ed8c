"""One case of a dense kind, run as a runner runs the op (``OpImpl``'s rules).

Each layer is built (``make_impl``), loaded once with its weights, then
called step after step; the oracle gets the same weights and arguments.
After every call the kit checks, in this order, that:

* the result has the form the kind returns (a tensor, or a tuple of them);
* no argument changed but those the kind hands over, and nothing around a
  strided argument in the buffer it is a view of;
* no result shares memory with a weight, or with an argument it may not
  share (rms_norm's ``s`` may be ``residual``; rotary's q and k their inputs);
* the weights record handed to ``load`` is as it was;
* each result has the oracle's shape, dtype and device and its values within
  the tolerance (indices exactly): the tolerance of the result's own dtype,
  so that rms_norm's float32 residual in a bfloat16 layer is held to
  float32's, not bfloat16's;

and after every step that no earlier result changed (each is the caller's
to keep: a workspace returned twice fails here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ...dtypes import dtype_name, torch_dtype
from ...ops.checks import build_impl
from .cases import STRIDED
from .kinds import cast_weights, record_items
from .op_cases import OpCase
from .op_inputs import Kept, place_op, shared_with
from .ops import OpCall
from .outcome import _backend, _Failure, _Worst
from .readonly import same_tensor
from .target import Target
from .tolerances import tolerance_for


@dataclass
class _OpLayer:
    spec: Any
    impl: Any
    oracle: Any
    weights: Any  # as handed to load, on the backend's device (None: a kind without weights)
    reference: Any  # the same values on the host: the oracle's, and what weights must still hold


def execute_op(target: Target, case: OpCase, env, device: str, tol: float, worst: _Worst) -> None:
    adapter = target.adapter
    gen = torch.Generator().manual_seed(case.seed)
    layers = [_layer(target, spec, env, device, gen, i) for i, spec in enumerate(case.specs)]
    results: list[tuple[str, torch.Tensor, torch.Tensor]] = []  # (where, result, its copy)
    for number, (rows, layout) in enumerate(case.steps):
        step = f"step {number + 1} of {len(case.steps)} ({rows} rows{', strided' if layout == STRIDED else ''})"
        shared: dict = {}  # this step's arguments every layer gets, the same objects
        for i, layer in enumerate(layers):
            for call in adapter.calls_of(layer.spec):
                where = f"{step}{f', layer {i}' if case.layers > 1 else ''}, {call.name}"
                host = dict(call.draw(layer.spec, rows, gen, number))
                given = place_op(host, call, device, layout)
                for name in call.shared:
                    host[name], given[name] = shared.setdefault((call.name, name), (host[name], given[name]))
                got = _call(layer, call, given, where)
                ref = _as_tuple(getattr(layer.oracle, call.method)(*host.values()), call)
                for name, out, expected in zip(call.outputs, got, ref):
                    _compare(out, expected, device, call, name, where, _bound(target, case, expected, tol), worst)
                    results.append((f"{where}: result {name!r}", out, out.detach().clone()))
        for where, out, copy in results:
            if not same_tensor(out.detach(), copy):
                raise _Failure(f"{where} changed by {step}: it shares memory the backend wrote later (a "
                               f"workspace?); return a tensor of its own")


def _bound(target: Target, case: OpCase, expected: torch.Tensor, tol: float) -> float:
    """The tolerance of the result's own dtype: ``tol`` (the case's) when it is the layer's, else the
    backend's bound for that dtype (a suite's tolerance override covers the layer's dtype only)."""
    dtype = dtype_name(expected.dtype)
    if dtype == case.dtype or not expected.is_floating_point():
        return tol
    return tolerance_for(target.cls, dtype)


def _layer(target: Target, spec, env, device: str, gen: torch.Generator, i: int) -> _OpLayer:
    adapter = target.adapter
    impl = _backend(build_impl, target.cls, spec, env, f"conformance.layers.{i}.{target.kind.name}", target.options)
    oracle = adapter.oracle(spec)
    drawn = adapter.weights(spec, gen) if adapter.weights else None
    weights = reference = None
    if drawn is not None:
        dtype = torch_dtype(spec.dtype)
        weights, reference = cast_weights(drawn, dtype, device), cast_weights(drawn, dtype, "cpu")
        _backend(impl.load, weights)
        oracle.load(reference)
        problem = _weights_changed(weights, reference)
        if problem:
            raise _Failure(f"layer {i}, load: {problem}")
    return _OpLayer(spec, impl, oracle, weights, reference)


def _call(layer: _OpLayer, call: OpCall, given: dict, where: str) -> tuple:
    kept = Kept(given)
    with torch.inference_mode():
        out = _backend(getattr(layer.impl, call.method), *given.values())
    got = _as_tuple(out, call, where)
    problem = kept.changed(given, call) or _aliased(got, given, layer, call)
    problem = problem or (layer.weights is not None and _weights_changed(layer.weights, layer.reference))
    if problem:
        raise _Failure(f"{where}: {problem}")
    return got


def _as_tuple(out: Any, call: OpCall, where: str | None = None) -> tuple:
    n = len(call.outputs)
    if n == 1:
        ok = isinstance(out, torch.Tensor)
        out = (out,)
    else:
        ok = isinstance(out, (tuple, list)) and len(out) == n
    if ok and all(isinstance(t, torch.Tensor) for t in out):
        return tuple(out)
    if where is None:  # the oracle's own
        raise TypeError(f"the oracle's {call.name} returned {type(out).__name__}")
    form = "a tensor" if n == 1 else f"a tuple of {n} tensors ({', '.join(call.outputs)})"
    raise _Failure(f"{where}: returned {_form(out)}, expected {form}")


def _form(out: Any) -> str:
    if isinstance(out, (tuple, list)):
        return f"a {type(out).__name__} of {len(out)} ({', '.join(type(t).__name__ for t in out)})"
    return type(out).__name__


def _aliased(got: tuple, given: dict, layer: _OpLayer, call: OpCall) -> str | None:
    weights = {} if layer.weights is None else record_items(layer.weights)
    for name, out in zip(call.outputs, got):
        others = {f"its input {k!r}": v for k, v in given.items() if k not in call.may_share.get(name, ())}
        hit = shared_with(out, {**{f"the layer's weight {k!r}": v for k, v in weights.items()}, **others})
        if hit:
            return f"result {name!r} shares memory with {hit}; return a tensor of its own"
    return None


def _weights_changed(weights: Any, reference: Any) -> str | None:
    for name, value in record_items(weights).items():
        if isinstance(value, torch.Tensor) and not same_tensor(value.detach().cpu(), getattr(reference, name)):
            return f"the backend changed the layer's weight {name!r} (the caller's; re-lay a copy in load)"
    return None


def _compare(out: torch.Tensor, ref: torch.Tensor, device: str, call: OpCall, name: str, where: str, tol: float,
             worst: _Worst) -> None:
    what = f"{where}: result {name!r}"
    if tuple(out.shape) != tuple(ref.shape):
        raise _Failure(f"{what} has shape {list(out.shape)}, expected {list(ref.shape)}")
    if out.dtype != ref.dtype:
        raise _Failure(f"{what} is {out.dtype}, expected {ref.dtype}")
    if out.device.type != torch.device(device).type:
        raise _Failure(f"{what} is on {out.device}, expected {device} (where its inputs are)")
    got = out.detach().cpu()
    if call.exact:
        wrong = (got != ref).reshape(got.shape[0], -1).any(1).nonzero()
        if wrong.numel():
            row = int(wrong[0])
            raise _Failure(f"{what} row {row}: {got[row].tolist()}, expected {ref[row].tolist()} (exactly)")
        return
    diff = (got.double() - ref.double()).abs().nan_to_num(nan=float("inf"))
    diff = diff.masked_fill(got.isnan() & ref.isnan(), 0).reshape(got.shape[0], -1)
    per_row = diff.max(dim=1).values
    row = int(per_row.argmax())
    err = float(per_row[row])
    worst.error = max(worst.error, err)
    if err > tol:
        raise _Failure(f"{what} row {row}: |backend - oracle| = {err:.3g} > tolerance {tol:g}")
