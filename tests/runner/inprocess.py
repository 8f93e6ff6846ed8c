"""`mixboard` commands run in this process (a subprocess costs ~1 s of imports each): the status
and what went to stderr, and the check every bad input must pass."""

from __future__ import annotations

from mixboard_runner.cli import main


def mixboard_here(capsys, *args) -> tuple[int, str]:
    capsys.readouterr()  # drop what came before
    status = main([str(a) for a in args])
    return status, capsys.readouterr().err


def assert_one_line_error(status: int, err: str, message: str | None = None, context=None) -> None:
    """Exit status 2 and exactly one line on stderr (holding ``message``), no traceback."""
    assert status == 2, (context, status, err)
    assert len(err.splitlines()) == 1 and err.endswith("\n") and "Traceback" not in err, (context, err)
    if message is not None:
        assert message in err, (context, err)
