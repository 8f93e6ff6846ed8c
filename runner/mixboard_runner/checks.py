"""Argument checks at the door: a bad value is a UsageError naming the
argument, the value and what is wanted, raised before anything is built."""

from __future__ import annotations

import math
import operator
from numbers import Real

from mixboard.errors import UsageError


def integer(name: str, value, low: int | None = None, high: int | None = None) -> int:
    """An int (numpy's too, never a bool) within [low, high]."""
    if isinstance(value, bool):
        raise UsageError(f"{name} must be an integer, not {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise UsageError(f"{name} must be an integer, not {value!r}") from None
    if low is not None and number < low or high is not None and number > high:
        raise UsageError(f"{name} must be {_range(low, high)}, not {number}")
    return number


def real(name: str, value, low: float | None = None, high: float | None = None) -> float:
    """A finite real number (an int is fine, a bool is not) within [low, high]."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise UsageError(f"{name} must be a number, not {value!r}")
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        number = math.inf
    if not math.isfinite(number):
        raise UsageError(f"{name} must be a finite number, not {number}")
    if low is not None and number < low or high is not None and number > high:
        raise UsageError(f"{name} must be {_range(low, high)}, not {number}")
    return number


def flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise UsageError(f"{name} must be True or False, not {value!r}")
    return value


def token_ids(name: str, value) -> tuple[int, ...]:
    """A sequence of non-negative token ids (a lone int or a string is a mistake, not a sequence)."""
    return tuple(integer(f"{name} entry", t, 0) for t in listing(name, value, "token ids"))


def _range(low, high) -> str:
    if high is None:
        return f">= {low}"
    if low is None:
        return f"<= {high}"
    return f"between {low} and {high}"


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
