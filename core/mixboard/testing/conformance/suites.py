"""Base test classes a vendor subclasses, naming its backend::

    from mixboard.testing.conformance import AttentionConformance   # or LinearConformance, RMSNormConformance, ...

    class TestAcmeAttention(AttentionConformance):
        backend = "acme_attn"        # an installed backend's name, or the Backend class itself
        device = "cpu"               # default: this machine's device if the backend runs there
        dtypes = ("float32", "bfloat16")   # default: every dtype the backend declares
        expected_failures = {"noncontiguous": "strided q lands in a later release"}
        thorough = False             # True: the long cases too (see modes.py)
        options = {"block": 64}      # the backend's declared options to build it with (default: their defaults)

pytest collects one test per case (``test_conformance[chunked_prefill[float32]]``).
The thorough mode (the long cases too) is on for a class with ``thorough =
True``, and for every class of a run with ``pytest --mixboard-thorough`` or
``MIXBOARD_THOROUGH=1``.
A case the backend's checks reject here (device, dtype, missing modules,
its own ``check()``) is skipped with those reasons. An expected failure is
``xfail(strict=True)``: if it passes, the test fails, so the declaration
cannot outlive the bug. Tolerances come from the backend's ``tolerances``
attribute (see ``tolerances.py``); a suite may override them.

pytest is imported only when pytest runs these classes.
"""

from __future__ import annotations

from typing import Any, ClassVar, Mapping

from .kinds import ADAPTERS, KindAdapter
from .op_kinds import OP_ADAPTERS
from .ops import OpAdapter
from .modes import thorough_from_env
from .runner import (
    FAIL, SKIP, XFAIL, check_expected, environment, expected_reason, resolve, run_case, suite_cases,
)
from .tolerances import tolerance_for


class _Unusable:
    """Stands for the cases when the suite itself is misdeclared, so that
    pytest reports one failing test saying why instead of a collection error."""

    def __init__(self, message: str):
        self.message = message


class ConformanceSuite:
    adapter: ClassVar[KindAdapter | OpAdapter | None] = None  # set by each kind's suite
    backend: ClassVar[Any] = None  # a backend name or a Backend subclass
    device: ClassVar[str | None] = None
    dtypes: ClassVar[tuple[str, ...] | None] = None
    block_size: ClassVar[int] = 4  # tokens per block of paged pools (rounded up to the state spec's block_multiple)
    expected_failures: ClassVar[Mapping[str, str]] = {}  # case id ("name[dtype]") or name -> reason
    tolerances: ClassVar[Mapping[str, float] | None] = None  # dtype -> bound, over the backend's own
    registry: ClassVar[Any] = None  # a mixboard.Registry to resolve names in (default: the installed one)
    thorough: ClassVar[bool] = False  # the long cases too; --mixboard-thorough or MIXBOARD_THOROUGH=1 for a whole run
    options: ClassVar[Mapping[str, Any]] = {}  # {option: value} of the backend's options; the rest at their defaults

    # -- what pytest sees -------------------------------------------------
    def pytest_generate_tests(self, metafunc):
        if "conformance_case" not in metafunc.fixturenames:
            return
        import pytest

        params = []
        for item in type(self).conformance_cases(thorough=metafunc.config.getoption("mixboard_thorough", False)):
            if isinstance(item, _Unusable):
                params.append(pytest.param(item, id="suite"))
                continue
            case, expected = item
            marks = [pytest.mark.xfail(strict=True, reason=expected)] if expected else []
            params.append(pytest.param(case, id=case.id, marks=marks))
        metafunc.parametrize("conformance_case", params)

    def test_conformance(self, conformance_case):
        import pytest

        if isinstance(conformance_case, _Unusable):
            pytest.fail(conformance_case.message, pytrace=False)
        # The xfail mark, not the runner, judges expected failures here (strict: a pass fails).
        result = type(self).run(conformance_case, expected=False)
        if result.status == SKIP:
            pytest.skip(result.reason)
        if result.status in (FAIL, XFAIL):
            if result.error is not None:  # show where the backend raised
                raise result.error
            pytest.fail(f"{result.case}: {result.reason}", pytrace=False)

    # -- the same, callable without pytest ----------------------------------
    @classmethod
    def target(cls):
        if cls.backend is None:
            raise ValueError(f"{cls.__name__} must name its backend: backend = \"my_backend\"")
        return resolve(cls.backend, cls.registry, cls.adapter).with_options(cls.options)

    @classmethod
    def conformance_cases(cls, thorough: bool = False) -> list:
        """[(case, expected failure reason or None)], or one _Unusable saying what is wrong.
        The long cases come too when ``thorough`` (the run asks), the class's
        own ``thorough`` or ``MIXBOARD_THOROUGH`` says so."""
        try:
            target = cls.target()
            cases = suite_cases(target, cls.dtypes or target.cls.dtypes, cls.block_size, thorough=True)
            expected = {**getattr(target.cls, "expected_failures", {}), **cls.expected_failures}
            check_expected(expected, cases)  # against every case: a long one may be declared
        except Exception as exc:  # noqa: BLE001 - reported as the suite's one failing test
            return [_Unusable(f"{cls.__name__}: {exc}")]
        if not (thorough or cls.thorough or thorough_from_env()):
            cases = [c for c in cases if not c.thorough]
        return [(c, expected_reason(expected, c)) for c in cases]

    @classmethod
    def run(cls, case, expected: bool = True):
        """Run one case; with ``expected`` a declared failure gives "xfail" (and a pass "fail")."""
        target = cls.target()
        device, env, skip = environment(target, cls.device)
        declared = {**getattr(target.cls, "expected_failures", {}), **cls.expected_failures}
        tol = tolerance_for(target.cls, case.dtype, cls.tolerances)
        reason = expected_reason(declared, case) if expected else None
        return run_case(target, case, env, device, tol, reason, skip)


def conformance_suite(adapter: KindAdapter | OpAdapter, name: str | None = None) -> type:
    """A base test class for the kind ``adapter`` describes (a kind a plugin defines)::

        RetentionConformance = conformance_suite(RETENTION_ADAPTER)

        class TestAcmeRetention(RetentionConformance):
            backend = "acme_retention"
    """
    cls_name = name or "".join(p.title() for p in adapter.kind.split("_")) + "Conformance"
    return type(cls_name, (ConformanceSuite,), {"adapter": adapter, "__module__": __name__,
                                                "__doc__": f"Conformance suite of kind {adapter.kind!r}."})


AttentionConformance = conformance_suite(ADAPTERS["attention"], "AttentionConformance")
Mamba1Conformance = conformance_suite(ADAPTERS["mamba1"], "Mamba1Conformance")
Mamba2Conformance = conformance_suite(ADAPTERS["mamba2"], "Mamba2Conformance")
ShortConvConformance = conformance_suite(ADAPTERS["short_conv"], "ShortConvConformance")

# The dense kinds (op_kinds.py): the same attributes; block_size plays no part.
LinearConformance = conformance_suite(OP_ADAPTERS["linear"], "LinearConformance")
RMSNormConformance = conformance_suite(OP_ADAPTERS["rms_norm"], "RMSNormConformance")
RotaryConformance = conformance_suite(OP_ADAPTERS["rotary"], "RotaryConformance")
EmbeddingConformance = conformance_suite(OP_ADAPTERS["embedding"], "EmbeddingConformance")
ArgmaxConformance = conformance_suite(OP_ADAPTERS["argmax"], "ArgmaxConformance")
MoEConformance = conformance_suite(OP_ADAPTERS["moe"], "MoEConformance")
