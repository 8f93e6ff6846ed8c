"""The conformance kit in half precision through a GPU backend's own code on this CPU machine, its
kernels the test doubles (tests/plugins/doubles: each library's documented semantics in plain torch,
summing in float32 where the real kernels do). What the interpreter lane cannot show (it runs
float32 only) and no GPU here can: the backend's dtype plumbing against the kind's oracle."""

from __future__ import annotations

from mixboard import simulate
from mixboard.testing.conformance import run_suite

H100 = simulate("cuda", "9.0")


def kit_failures(backend: type, dtypes=("bfloat16", "float16")) -> tuple[list, dict]:
    """(failed cases with their reasons, counts) of the kit through ``backend`` on CPU tensors; what
    the backend refuses on an H100 is skipped, as there. The doubles must be importable already."""

    class OnDoubles(backend):  # served on CPU tensors: the doubles run wherever torch does
        name = f"{backend.name}_on_doubles"
        devices = ("cpu",)

        @classmethod
        def check(cls, spec, env):
            return backend.check.__func__(cls, spec, H100)

    report = run_suite(OnDoubles, "cpu", list(dtypes))
    return [(r.case, r.reason) for r in report.results if r.status == "fail"], report.counts()
