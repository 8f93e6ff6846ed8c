"""One case of a mixer kind, step by step as a runner feeds it: the backend's layers beside the
oracle's, each step's metadata through the backend's builder, every output compared and every
input, pool record and shared meta checked for what the backend must leave alone."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Any, Iterator

import torch

from ...dtypes import torch_dtype
from ...environment_facts import Environment
from ...metadata import CommonBatchMetadata
from ...ops.checks import build_builder, build_impl
from ..oracles import allocate_state
from .cases import STRIDED, Case
from .inputs import draw_inputs, place
from .isolation import changed_foreign_record, owned_records, poison
from .kinds import cast_weights, record_items
from .outcome import _backend, _Failure, _Worst
from .pages import Pages, allocate_in_pages
from .readonly import Received, aliased, changed_inputs, keep_inputs, leaked, same_tensor
from .target import Target, state_spec


@dataclass
class _Layer:
    """One layer of a case: the backend's impl and pools beside the oracle's."""

    impl: Any
    oracle: Any
    weights: Any  # on the backend's device
    oracle_weights: Any  # the same values, on the host
    state: dict  # the backend's own layout, poisoned
    oracle_state: dict  # the kind's canonical layout
    pages: Pages | None = None  # the pages the pools sit in, in a case that lays them out so (pages.py)


def block_size_for(case: Case, own_state) -> int:
    """The case's block size, rounded up to the multiple the backend's paged
    state asks for (flash-attn's kernel: 256). Sequences then need fewer of
    their planned blocks."""
    multiple = getattr(own_state, "block_multiple", 1)
    return -(-case.block_size // multiple) * multiple


def _layers(target: Target, case: Case, env: Environment, device: str, gen: torch.Generator,
            block_size: int) -> list[_Layer]:
    spec, adapter = case.spec, target.adapter
    dtype = torch_dtype(spec.dtype)
    own, canonical = state_spec(target, spec), target.kind.state_spec(spec)
    layers = []
    for i in range(case.layers):
        weights = adapter.weights(spec, gen) if adapter.weights else None
        pages = None
        if case.pools == STRIDED:
            state, pages = allocate_in_pages(own, case.records(own.layout), block_size, device)
        else:
            state = allocate_state(own, case.records(own.layout), block_size, device)
        poison(state)
        layers.append(_Layer(
            impl=_backend(build_impl, target.cls, spec, env, f"conformance.layers.{i}.mixer", target.options),
            oracle=adapter.oracle(spec),
            weights=cast_weights(weights, dtype, device),
            oracle_weights=cast_weights(weights, dtype, "cpu"),
            state=state,
            oracle_state=allocate_state(canonical, case.records(canonical.layout), block_size, "cpu"),
            pages=pages,
        ))
    return layers


@dataclass
class Step:
    """One step of a case as a runner feeds it."""

    number: int  # from 1
    order: list[tuple[str, int]]  # (sequence, new tokens), decodes first
    query: list[int]  # new tokens per sequence, in that order
    context: list[int]  # tokens each has from earlier steps
    slots: list[int]
    tables: list[tuple[int, ...]]  # the blocks each holds once the step is done


def case_steps(case: Case, block_size: int) -> Iterator[Step]:
    """The steps of ``case`` over blocks of ``block_size`` tokens, each sequence continuing where it stopped."""
    done = {s.name: 0 for s in case.seqs}
    for number, step in enumerate(case.steps, 1):
        # Decodes (one new token after earlier context) come first, as the runner orders them.
        order = sorted(step, key=lambda c: not (c[1] == 1 and done[c[0]] > 0))
        seqs = [case.seq(name) for name, _ in order]
        query = [n for _, n in order]
        context = [done[name] for name, _ in order]
        tables = [s.blocks[: -(-(c + q) // block_size)] for s, c, q in zip(seqs, context, query)]
        yield Step(number, order, query, context, [s.slot for s in seqs], tables)
        for name, n in order:
            done[name] += n


def execute_mixer_case(target: Target, case: Case, env: Environment, device: str, tol: float, worst: _Worst) -> None:
    adapter, spec = target.adapter, case.spec
    dtype = torch_dtype(spec.dtype)
    gen = torch.Generator().manual_seed(case.seed)
    own = state_spec(target, spec)
    layout, bs = own.layout, block_size_for(case, own)
    layers = _layers(target, case, env, device, gen, bs)
    with torch.inference_mode():  # one builder per case, as a runner keeps one per group for every step
        builder = _backend(build_builder, target.cls, spec, env, target.options)
    for step in case_steps(case, bs):
        number, order, query, context, slots, tables = (step.number, step.order, step.query, step.context,
                                                        step.slots, step.tables)
        where = f"step {number} of {len(case.steps)}"
        common_cpu = CommonBatchMetadata.build(query, context, slots, tables, bs, "cpu", case.pad_block)
        fresh_common = partial(CommonBatchMetadata.build, query, context, slots, tables, bs, device, case.pad_block)
        common = fresh_common()  # the backend's own copy, on its device, through its builder
        received = Received(common)
        with torch.inference_mode():
            meta = _backend(builder, common)
        problem = received.changed("the builder")
        if problem:
            raise _Failure(f"{where}: {problem}")
        received.add_meta(meta)
        owned = owned_records(layout, zip(slots, tables))
        outputs = []
        for i, layer in enumerate(layers):
            if case.layers > 1:
                where = f"step {number} of {len(case.steps)}, layer {i}"
            inputs = draw_inputs(adapter.inputs(spec), sum(query), dtype, gen)
            # Later layers also run on a meta of their own, to tell what earlier ones left in the shared one.
            alone = _run_alone(target, builder, fresh_common, layer, inputs, device, case) if i else None
            given = place(inputs, device, case.layout)
            kept = keep_inputs(given)
            before = {k: v.clone() for k, v in layer.state.items()}
            with torch.inference_mode():
                out = _backend(adapter.call, layer.impl, given, layer.weights, layer.state, meta)
            wrote_between = layer.pages and layer.pages.changed()  # first: it names what the backend did
            if wrote_between:
                raise _Failure(f"{where}: {wrote_between}")
            _check_received(out, given, kept, layer, where)
            problem = received.changed("forward") or (alone and leaked(out, *alone, meta, tol))
            if problem:
                raise _Failure(f"{where}: {problem}")
            ref = adapter.call(layer.oracle, inputs, layer.oracle_weights, layer.oracle_state, common_cpu)
            _compare(out, ref, device, order, context, where, tol, worst)
            moved = changed_foreign_record(layout, before, layer.state, owned)
            if moved:
                raise _Failure(f"{where}: {moved}")
            if case.layers > 1 and isinstance(out, torch.Tensor):
                outputs.append((i, out, out.detach().clone()))
        for i, out, copy in outputs:
            if not same_tensor(out.detach(), copy):
                raise _Failure(f"step {number} of {len(case.steps)}: layer {i}'s output changed while a later layer "
                               f"ran: it shares memory that layer wrote (a workspace in the shared meta?); return a "
                               f"tensor of its own")


def _run_alone(target: Target, builder, fresh_common, layer: _Layer, inputs: dict, device: str, case: Case):
    """(output, meta) of the layer on this step with a meta of its own and a copy of its state."""
    with torch.inference_mode():
        meta = _backend(builder, fresh_common())
        state = {k: v.clone() for k, v in layer.state.items()}
        out = _backend(target.adapter.call, layer.impl, place(inputs, device, case.layout), layer.weights, state,
                       meta)
    return (out.detach().clone() if isinstance(out, torch.Tensor) else out), meta


def _check_received(out: Any, given: dict, kept: dict, layer: _Layer, where: str) -> None:
    """Nothing handed to forward changed, and the output is the caller's own."""
    weights = {} if layer.weights is None else record_items(layer.weights)
    problem = (aliased(out, {**{f"input {k!r}": v for k, v in given.items()},
                             **{f"the layer's weight {k!r}": v for k, v in weights.items()},
                             **{f"state[{k!r}]": v for k, v in layer.state.items()}})
               or changed_inputs(given, kept, weights, layer.oracle_weights))
    if problem:
        raise _Failure(f"{where}: {problem}")


def _compare(out: Any, ref: torch.Tensor, device: str, order, context, where: str, tol: float, worst: _Worst) -> None:
    if not isinstance(out, torch.Tensor):
        raise _Failure(f"{where}: forward returned {type(out).__name__}, not a tensor")
    if tuple(out.shape) != tuple(ref.shape):
        raise _Failure(f"{where}: output has shape {list(out.shape)}, expected {list(ref.shape)}")
    if out.dtype != ref.dtype:
        raise _Failure(f"{where}: output is {out.dtype}, expected {ref.dtype} (the layer's dtype)")
    if out.device.type != torch.device(device).type:
        raise _Failure(f"{where}: output is on {out.device}, expected {device} (where its inputs are)")
    if out.numel() == 0:
        return
    diff = (out.detach().to("cpu", torch.float64) - ref.to(torch.float64)).abs().reshape(out.shape[0], -1)
    per_token = diff.nan_to_num(nan=math.inf).max(dim=1).values
    token = int(per_token.argmax())
    err = float(per_token[token])
    worst.error = max(worst.error, err)
    if err > tol:
        # Name the sequence and position of the worst token: where a bug shows first.
        start = 0
        for (name, n), ctx in zip(order, context):
            if token < start + n:
                raise _Failure(f"{where}: sequence {name!r} at position {ctx + token - start}: "
                               f"|backend - oracle| = {err:.3g} > tolerance {tol:g}")
            start += n
