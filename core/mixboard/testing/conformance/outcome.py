"""How a case ends early: a conformance violation the kit found (``_Failure``), or the backend
raising (``_Raised``, through ``_backend``); and the worst error seen so far. Shared by the runs of
a mixer kind's case (mixer_case.py), a dense kind's (op_runner.py) and a capture case (capture.py)."""

from __future__ import annotations


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


class _Worst:
    error = 0.0
