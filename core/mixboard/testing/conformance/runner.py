"""Run the kit's cases against a backend, without pytest.

``run_suite("sdpa")`` resolves the backend in the installed registry (or
takes a Backend class as is), and runs every case of its kind for every
dtype asked: the backend is built as a runner builds it (``build_impl``;
its own ``builder`` turns each step's ``CommonBatchMetadata`` into its
``meta``, once per step, reused by every layer of the case; its own
``state_spec`` sizes the pools) and compared step by step with the kind's
oracle. Each case gives a :class:`CaseResult` with the worst error.

A case runs in mixer_case.py (a mixer kind's), op_runner.py (a dense
kind's) or capture.py (a capture declaration's); target.py resolves the
backend, outcome.py holds how a case ends early.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ...environment_facts import Environment
from ...errors import UsageError
from ...registry import Registry
from ...selection import reasons_against
from ...state import PAGED
from .capture import declared_skip, execute_capture
from .cases import Case, kind_cases
from .kinds import KindAdapter
from .mixer_case import execute_mixer_case
from .modes import is_thorough
from .op_cases import op_cases
from .op_runner import execute_op
from .ops import OpAdapter
from .outcome import _Failure, _Raised, _Worst
from .target import Target, default_device, environment, resolve, state_spec  # noqa: F401 (the kit's names)
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


# --------------------------------------------------------------------------- one case


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
        declared = declared_skip(target.cls, case)
        if declared:
            return CaseResult(case.id, SKIP, None, tolerance, declared)
    worst = _Worst()
    try:
        if capture:
            execute_capture(target, case, env, device, tolerance, worst)
        elif isinstance(case, Case):
            execute_mixer_case(target, case, env, device, tolerance, worst)
        else:  # a dense kind's (op_cases.py)
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
