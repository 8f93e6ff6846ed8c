"""Run the kit's cases against a backend, without pytest.

``run_suite("sdpa")`` resolves the backend in the installed registry (or
takes a Backend class as is), and runs every case of its kind for every
dtype asked: the backend is built as a runner builds it (``build_impl``;
its own ``builder`` turns each step's ``CommonBatchMetadata`` into its
``meta``, once per step, reused by every layer of the case; its own
``state_spec`` sizes the pools) and compared step by step with the kind's
oracle. Each case gives a :class:`CaseResult` with the worst error.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Iterable, Iterator, Mapping

import torch

from ...backend import ANY_DEVICE, Backend, declares_state_spec
from ...dtypes import torch_dtype
from ...environment import Environment, detect, for_device, known_devices
from ...errors import UsageError, did_you_mean
from ...metadata import CommonBatchMetadata
from ...ops.checks import build_builder, build_impl
from ...option_rules import for_backend
from ...registry import Registry, get_registry
from ...selection import reasons_against
from ...state import PAGED
from ..oracles import allocate_state
from .cases import STRIDED, Case, kind_cases
from .inputs import draw_inputs, place
from .isolation import changed_foreign_record, owned_records, poison
from .kinds import KindAdapter, adapter_of, cast_weights, record_items
from .modes import is_thorough
from .op_cases import op_cases
from .ops import OpAdapter
from .pages import Pages, allocate_in_pages
from .readonly import Received, aliased, changed_inputs, keep_inputs, leaked, same_tensor
from .tolerances import tolerance_for

PASS, FAIL, SKIP, XFAIL = "pass", "fail", "skip", "xfail"


@dataclass
class CaseResult:
    case: str  # the case id, e.g. "chunked_prefill[float32]"
    status: str  # pass | fail | skip | xfail
    max_abs_error: float | None = None  # worst |backend - oracle| over every step (None if nothing compared)
    tolerance: float | None = None
    reason: str | None = None  # why it failed, was skipped, or was expected to fail
    seconds: float = 0.0
    error: BaseException | None = field(default=None, repr=False)  # what the backend raised, if it did

    def to_dict(self) -> dict[str, Any]:
        """The ``mixboard check --json`` record. A non-finite error (the backend
        returned NaN or inf) is written as the string "nan" or "inf"."""
        err = self.max_abs_error
        if err is not None and not math.isfinite(err):
            err = str(err)
        return {"case": self.case, "status": self.status, "max_abs_error": err, "tolerance": self.tolerance,
                "reason": self.reason}


@dataclass(frozen=True)
class Target:
    """A backend resolved for the kit, with its kind's adapter."""

    cls: type
    kind: Any  # mixboard.Kind
    adapter: KindAdapter | OpAdapter
    options: Any = None  # the backend's OptionValues to build it with (None: its defaults)

    def with_options(self, given: Mapping[str, Any] | None) -> "Target":
        """This target built with ``given`` ({option: value}; the rest at their defaults), checked."""
        return dataclasses.replace(self, options=for_backend(self.cls, given))


@dataclass
class SuiteReport:
    backend: str
    device: str
    environment: Environment | None  # None: the device is not available here (every case skipped)
    dtypes: tuple[str, ...]
    results: list[CaseResult]
    thorough: bool = False  # the mode: quick, or thorough (the long cases too)
    options: dict = field(default_factory=dict)  # the backend's option values it ran with (none declared: {})

    @property
    def ok(self) -> bool:
        return all(r.status != FAIL for r in self.results)

    def counts(self) -> dict[str, int]:
        return {s: sum(r.status == s for r in self.results) for s in (PASS, FAIL, SKIP, XFAIL)}


# --------------------------------------------------------------------------- resolving


def resolve(backend: str | type, registry: Registry | None = None, adapter: KindAdapter | OpAdapter | None = None
            ) -> Target:
    """A backend by name (looked up in ``registry``, default the installed
    one) or a Backend class given directly. ``adapter`` describes a kind a
    plugin defines (the built-in kinds have theirs)."""
    registry = registry or get_registry()
    if isinstance(backend, str):
        entry = registry.backends.get(backend)
        if entry is None:
            hint = did_you_mean(backend, registry.backends)
            installed = ", ".join(sorted(registry.backends)) or "none"
            raise UsageError(f"unknown backend {backend!r}{hint} (installed backends: {installed}; "
                             f"see `mixboard plugins` for plugins that failed to load)")
        cls = entry.cls
    elif isinstance(backend, type) and issubclass(backend, Backend):
        cls = backend
    else:
        raise UsageError(f"the kit takes a backend name or a mixboard.Backend subclass, not {backend!r}")
    kind = registry.kind(cls.kind)
    adapter = adapter or adapter_of(kind)
    if adapter is None:
        raise UsageError(f"backend {cls.name!r} serves kind {cls.kind!r}, which has no conformance adapter: the "
                         f"plugin that defines the kind describes it with mixboard.testing.conformance.KindAdapter (a "
                         f"dense kind: OpAdapter) and declares it on the Kind (conformance='module:NAME'); see "
                         f"docs/conformance.md")
    if adapter.kind != cls.kind:
        raise UsageError(f"backend {cls.name!r} serves {cls.kind}, not {adapter.kind}: use the {cls.kind} suite")
    return Target(cls, kind, adapter)


def default_device(cls: type) -> str:
    """This machine's device if the backend runs there, else the first device it declares."""
    here = detect().device
    return here if ANY_DEVICE in cls.devices or here in cls.devices else cls.devices[0]


def environment(target: Target, device: str | None) -> tuple[str, Environment | None, list[str]]:
    """(device, its environment, []) or (device, None, reasons every case is skipped).

    A malformed device is a UsageError; a device this machine lacks skips
    every case, with that and the backend's reasons against this machine."""
    cls = target.cls
    device = device or default_device(cls)
    known = known_devices()  # torch's and those plugins describe (out-of-tree devices)
    try:
        dev_type, present = torch.device(device).type, True
    except (RuntimeError, TypeError):  # torch lacks it here: a plugin's device whose extension is not loaded?
        dev_type, present = str(device).partition(":")[0], False
    if dev_type not in known:
        raise UsageError(f"unknown device {device!r}; expected a torch device: {', '.join(known)}, "
                         f"optionally with an index (cuda:1)")
    try:
        return device, for_device(device), []
    except UsageError as exc:
        if not present:  # reasons against this machine would only add "runs on acme; this is cpu"
            return device, None, [str(exc)]
        spec = target.kind.default_spec()
        if spec.dtype not in cls.dtypes:  # reasons that hold for every case, not the probe's dtype
            spec = dataclasses.replace(spec, dtype=cls.dtypes[0])
        return device, None, [str(exc), *reasons_against(cls, spec, detect())]


def state_spec(target: Target, spec: Any):
    """The backend's own state layout (its ``state_spec``, else the kind's canonical one)."""
    cls = target.cls
    if not declares_state_spec(cls):
        return target.kind.state_spec(spec)
    return _backend(cls.state_spec, spec)


# --------------------------------------------------------------------------- one case


class _Failure(Exception):
    """A conformance violation found while running a case (not a backend exception)."""


class _Raised(Exception):
    """The backend raised (in its builder, make_impl or forward): the case's outcome.
    Anything else that raises while a case runs is the kit's own bug and propagates."""

    def __init__(self, error: Exception):
        super().__init__(f"raised {type(error).__name__}: {error}")
        self.error = error


def _backend(call, *args):
    try:
        return call(*args)
    except Exception as exc:
        raise _Raised(exc) from exc


def run_case(target: Target, case: Case, env: Environment | None, device: str, tolerance: float,
             expected: str | None = None, skip_reasons: Iterable[str] = ()) -> CaseResult:
    """Run one case; ``expected`` is the reason it is declared to fail (strict: a pass is a failure)."""
    start = time.perf_counter()
    specs = getattr(case, "specs", (case.spec,))  # a dense kind's case may hold layers of two specs
    reasons = list(skip_reasons) or list(dict.fromkeys(
        r for spec in specs for r in reasons_against(target.cls, spec, env)))
    if reasons:
        return CaseResult(case.id, SKIP, None, tolerance, "; ".join(reasons))
    capture = isinstance(case, Case) and case.capture is not None
    if capture:  # a case of the backend's capture declaration (capture.py): nothing to check where it declares less
        from .capture import declared_skip

        declared = declared_skip(target.cls, case)
        if declared:
            return CaseResult(case.id, SKIP, None, tolerance, declared)
    worst = _Worst()
    try:
        if capture:
            from .capture import execute_capture

            execute_capture(target, case, env, device, tolerance, worst)
        elif isinstance(case, Case):
            _execute(target, case, env, device, tolerance, worst)
        else:  # a dense kind's (op_cases.py)
            from .op_runner import execute_op

            execute_op(target, case, env, device, tolerance, worst)
        result = CaseResult(case.id, PASS, worst.error, tolerance)
    except _Failure as exc:
        result = CaseResult(case.id, FAIL, worst.error, tolerance, str(exc))
    except _Raised as exc:
        result = CaseResult(case.id, FAIL, worst.error or None, tolerance, str(exc), error=exc.error)
    result.seconds = time.perf_counter() - start
    if expected is not None:
        if result.status == PASS:
            result.status, result.reason = FAIL, f"declared as an expected failure ({expected}) but passed"
        else:
            result.status, result.reason = XFAIL, f"{expected} (failed as declared: {result.reason})"
    return result


class _Worst:
    error = 0.0


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


def _execute(target: Target, case: Case, env: Environment, device: str, tol: float, worst: _Worst) -> None:
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


# --------------------------------------------------------------------------- a whole suite


def suite_cases(target: Target, dtypes: Iterable[str], block_size: int, thorough: bool = False) -> list[Case]:
    dtypes = tuple(dtypes)
    if isinstance(target.adapter, OpAdapter):  # a dense kind: no state, no blocks
        return [c for dtype in dtypes for c in op_cases(target.adapter, target.kind.spec, dtype, thorough=thorough)]
    paged = keeps_paged_state(target, dtypes[0]) if dtypes else True
    return [c for dtype in dtypes
            for c in kind_cases(target.adapter, target.kind.spec, dtype, block_size, thorough=thorough, paged=paged)]


def keeps_paged_state(target: Target, dtype: str) -> bool:
    """Whether the backend's state is paged, so that cases with other block
    sizes apply. One whose ``state_spec`` raises runs them (and fails there)."""
    try:
        return state_spec(target, target.kind.spec(**{**target.adapter.base, "dtype": dtype})).layout == PAGED
    except Exception:  # noqa: BLE001 - reported by the cases themselves
        return True


def check_expected(expected: Mapping[str, str], cases: Iterable[Case]) -> None:
    """Every key of ``expected_failures`` must name a case id or a case name (all its dtypes)."""
    known = {c.id for c in cases} | {c.name for c in cases}
    unknown = sorted(set(expected) - known)
    if unknown:
        names = ", ".join(sorted({c.name for c in cases}))
        raise UsageError(f"expected_failures names no case: {', '.join(unknown)} (cases are {names}; "
                         f"add [dtype] for one dtype only)")


def expected_reason(expected: Mapping[str, str], case: Case) -> str | None:
    return expected.get(case.id, expected.get(case.name))


def run_suite(backend: str | type, device: str | None = None, dtypes: Iterable[str] | None = None, *,
              block_size: int = 4, expected_failures: Mapping[str, str] | None = None,
              tolerances: Mapping[str, float] | None = None, registry: Registry | None = None,
              adapter: KindAdapter | OpAdapter | None = None, select: Iterable[str] | None = None,
              fail_fast: bool = False, thorough: bool | None = None,
              options: Mapping[str, Any] | None = None) -> SuiteReport:
    """Run the kit against ``backend`` (a name or a Backend class).

    dtypes: default every dtype the backend declares. expected_failures:
    {case id or name: reason}, added to the backend's own declaration.
    select: only cases whose id or name is listed. fail_fast: stop at the
    first failure. thorough: the long cases too (see ``modes.py``); None
    leaves it to ``MIXBOARD_THOROUGH``. options: {option: value} of the
    backend's declared options to build it with (the rest at their defaults).
    """
    target = resolve(backend, registry, adapter).with_options(options)
    cls = target.cls
    dtypes = tuple(dtypes or cls.dtypes)
    device, env, skip = environment(target, device)
    thorough = is_thorough(thorough)
    cases = suite_cases(target, dtypes, block_size, thorough=True)  # expected failures may name any case
    expected = {**getattr(cls, "expected_failures", {}), **(expected_failures or {})}
    check_expected(expected, cases)
    if select is not None:  # a case named is run, whatever the mode
        wanted = set(select)
        cases = [c for c in cases if c.id in wanted or c.name in wanted]
        thorough = thorough or any(c.thorough for c in cases)  # the report says a long case ran
    elif not thorough:
        cases = [c for c in cases if not c.thorough]
    results = []
    for case in cases:
        tol = tolerance_for(cls, case.dtype, tolerances)
        result = run_case(target, case, env, device, tol, expected_reason(expected, case), skip)
        results.append(result)
        if fail_fast and result.status == FAIL:
            break
    return SuiteReport(cls.name, device, env, dtypes, results, thorough, dict(target.options))
