"""Saying which backend failed: what a backend's impl or builder raises
becomes one BackendError naming the backend, the layer and what it raised
(the original is its ``__cause__``). mixboard's own errors and interrupts
pass as they are."""

from __future__ import annotations

from contextlib import contextmanager

from mixboard.errors import BackendError, MixboardError


def backend_error(backend: str, layer: str, doing: str, exc: BaseException) -> BackendError:
    said = (str(exc).strip().splitlines() or [""])[0]  # one line: the first of the message
    return BackendError(f"backend {backend!r} of layer {layer!r} raised {type(exc).__name__} {doing}"
                        + (f": {said}" if said else ""))


def _blamable(exc: BaseException) -> bool:
    return isinstance(exc, Exception) and not isinstance(exc, MixboardError)


@contextmanager
def blaming(backend: str, layer: str, doing: str):
    """What the block raises is the backend's, while the engine binds it."""
    try:
        yield
    except Exception as exc:
        if _blamable(exc):
            raise backend_error(backend, layer, doing, exc) from exc
        raise


@contextmanager
def blamed(owners: dict[int, tuple[str, str]]):
    """What the block raises from a backend's impl or builder (see ``blame``) names it."""
    try:
        yield
    except BaseException as exc:
        error = blame(exc, owners)
        if error is not None:
            raise error from exc
        raise


def blame(exc: BaseException, owners: dict[int, tuple[str, str]]):
    """The BackendError for ``exc`` raised during a step, or None when no
    backend's code raised it. ``owners`` maps id(impl or builder) to
    (backend, layer); the deepest of their frames in the traceback is blamed."""
    if not _blamable(exc):
        return None
    found, tb = None, exc.__traceback__
    while tb is not None:
        this = tb.tb_frame.f_locals.get("self")
        owner = owners.get(id(this)) if this is not None else None
        if owner is not None:
            found = owner
        tb = tb.tb_next
    return None if found is None else backend_error(*found, "while it ran", exc)
