"""Argument checks at the door: a bad value is a UsageError naming the
argument, the value and what is wanted, raised before anything is built."""

from __future__ import annotations

import math
import operator
from numbers import Real

from mixboard.errors import UsageError


def show(value, limit: int = 60) -> str:
    """repr(value), cut short: a message stays one readable line."""
    try:
        text = repr(value)
    except ValueError:  # an int of more than 4300 digits has no repr
        return f"<an int of {value.bit_length()} bits>" if isinstance(value, int) else "<no repr>"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def is_integer(value) -> bool:
    """An int (numpy's too), never a bool."""
    if isinstance(value, bool):
        return False
    try:
        operator.index(value)
    except TypeError:
        return False
    return True


def integer(name: str, value, low: int | None = None, high: int | None = None, *, error=UsageError) -> int:
    """An int (numpy's too, never a bool) within [low, high]; else ``error`` naming what is wanted."""
    if not is_integer(value) or low is not None and value < low or high is not None and value > high:
        raise error(f"{name} must be {_wanted('an integer', low, high)}, not {show(value)}")
    return operator.index(value)


def real(name: str, value, low: float | None = None, high: float | None = None, *, above: bool = False,
         error=UsageError) -> float:
    """A finite real number (an int is fine, a bool is not) within [low, high], or above low with
    ``above``; else ``error`` naming what is wanted."""
    number = _float(value) if isinstance(value, Real) and not isinstance(value, bool) else math.nan
    if (not math.isfinite(number) or low is not None and (number <= low if above else number < low)
            or high is not None and number > high):
        raise error(f"{name} must be {_wanted('a finite number', low, high, above)}, not {show(value)}")
    return number


def _float(value) -> float:
    """float(value), an int too large for a float being infinite."""
    try:
        return float(value)
    except OverflowError:
        return math.inf


def _wanted(what: str, low, high, above: bool = False) -> str:
    if low is not None and high is not None:
        return f"{what} above {low} and <= {high}" if above else f"{what} from {low} to {high}"
    if low is not None:
        return f"{what} {'above' if above else '>='} {low}"
    if high is not None:
        return f"{what} <= {high}"
    return what


def flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise UsageError(f"{name} must be True or False, not {value!r}")
    return value


def token_ids(name: str, value) -> tuple[int, ...]:
    """A sequence of non-negative token ids (a lone int or a string is a mistake, not a sequence)."""
    return tuple(integer(f"{name} entry", t, 0) for t in listing(name, value, "token ids"))


def instance(name: str, value, cls: type, wanted: str | None = None):
    """``value`` if it is a ``cls``, else a UsageError saying what was wanted."""
    if not isinstance(value, cls):
        raise UsageError(f"{name} must be {wanted or 'a ' + cls.__name__}, not {value!r}")
    return value


def listing(name: str, value, what: str) -> list:
    """A list of items from any iterable but text, which would be one item mistaken for many."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise UsageError(f"{name} must be a list of {what}, not {value!r}")
    return list(value)


def utf8(value):
    """Text that can be encoded (bytes a shell could not decode arrive as surrogates); other values pass."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raw = value.encode("utf-8", "surrogateescape")
            raise UsageError(f"a prompt is not valid UTF-8 text: {raw[:40]!r}") from None
    return value


def prompts(value) -> list:
    """A list of prompts (text, or lists of token ids)."""
    items = listing("prompts", value, "prompts (text or token ids)")
    if items and all(isinstance(p, int) for p in items):  # the commonest slip: one prompt, unwrapped
        raise UsageError("prompts must be a list of prompts; for one prompt of token ids write [[1, 2, 3]]")
    return items


def prompt_ids(prompt) -> list[int] | None:
    """A prompt's token ids, checked; None for text (the tokenizer's to encode)."""
    if isinstance(prompt, str):
        return None
    return list(token_ids("a prompt", prompt))
