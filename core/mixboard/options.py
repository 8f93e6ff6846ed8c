"""Typed backend options: what a backend lets its users set.

A backend declares them as a tuple of ``Option`` in its declaration::

    class LinearOneDnn(Backend):
        declaration = PLUGIN(name="linear_onednn", kind="linear", options=(
            Option("layout", str, "packed", "how the weight is stored for oneDNN's product",
                   choices=("packed", "as_loaded", "column_major")),
        ))

and receives every declared option's value, the user's or the default, as
``options`` in ``make_impl`` and ``builder`` (an ``OptionValues``: read-only,
``options.layout`` or ``options["layout"]``). Users set them per backend
(``option_rules.py``); the values are part of the plan and its fingerprint.

Plain classes, not dataclasses: this module loads in every process that
plans, and dataclasses are slow to define (the registry's cold start,
``benchmarks/README.md``).
"""

from __future__ import annotations

import math
from typing import Any, Iterator, Mapping

TYPES = {bool: "boolean", int: "integer", float: "number", str: "string"}
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


class Option:
    """One option a backend declares: ``name``, ``type`` (bool, int, float or
    str), ``default`` (of that type), ``doc`` (one line: what it changes and
    when to change it), and optionally ``choices`` (str or int: the only
    values allowed) or ``minimum`` (int or float: the smallest allowed).

    Immutable and hashable. The plugin loader checks the declaration (a bad
    one leaves the backend out as a plugin fault, ``declaration_problem``).
    """

    __slots__ = ("name", "type", "default", "doc", "choices", "minimum")

    def __init__(self, name: str, type: type, default: Any, doc: str, *, choices: tuple | None = None,
                 minimum: int | float | None = None):
        for slot, value in (("name", name), ("type", type), ("default", default), ("doc", doc),
                            ("choices", choices), ("minimum", minimum)):
            object.__setattr__(self, slot, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Option is immutable: cannot set {name!r}")

    def _key(self) -> tuple:
        return (self.name, self.type, self.default, self.doc, self.choices, self.minimum)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Option) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        extra = "".join(f", {k}={getattr(self, k)!r}" for k in ("choices", "minimum") if getattr(self, k) is not None)
        kind = getattr(self.type, "__name__", self.type)
        return f"Option({self.name!r}, {kind}, {self.default!r}, {self.doc!r}{extra})"

    @property
    def type_name(self) -> str:
        """``boolean``, ``integer``, ``number`` or ``string`` (JSON's words, as docs/json.md uses them)."""
        return TYPES.get(self.type, repr(self.type))

    def wanted(self) -> str:
        """What a value must be, in words: ``one of packed, as_loaded``, ``an integer of at least 1``."""
        if self.choices is not None:
            return "one of " + ", ".join(str(c) for c in self.choices)
        if self.type is bool:
            return "true or false"
        what = {int: "an integer", float: "a finite number", str: "a string"}[self.type]
        return what if self.minimum is None else f"{what} of at least {self.minimum}"

    def value_problem(self, value: Any) -> str | None:
        """Why ``value`` (already of some Python type) is not a value of this option, or None."""
        if self.type is bool:
            ok = isinstance(value, bool)
        elif self.type is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif self.type is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        else:
            ok = isinstance(value, str) and value != ""
        if not ok or (self.choices is not None and value not in self.choices) or (
                self.minimum is not None and value < self.minimum):
            return f"{self.name} takes {self.wanted()}, not {value!r}"
        return None

    def coerce(self, value: Any) -> Any:
        """``value`` as this option's type: text is parsed (``--backend-option``, an environment
        variable), anything else must already be of the type (a mapping, a lock file's JSON).
        Raises ValueError saying what is wanted."""
        if isinstance(value, str) and self.type is not str:
            value = self._parse(value.strip())
        elif self.type is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        problem = self.value_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    def _parse(self, text: str) -> Any:
        try:
            if self.type is bool:
                if text.lower() in _TRUE:
                    return True
                if text.lower() in _FALSE:
                    return False
                raise ValueError
            return self.type(text)
        except ValueError:
            raise ValueError(f"{self.name} takes {self.wanted()}, not {text!r}") from None

    def to_dict(self) -> dict[str, Any]:
        """What ``mixboard backends NAME --json`` prints (docs/json.md)."""
        return {"name": self.name, "type": self.type_name, "default": self.default, "doc": self.doc,
                "choices": None if self.choices is None else list(self.choices), "minimum": self.minimum}


class OptionValues(Mapping):
    """Every declared option of one backend with its value (the user's, else the default):
    what ``make_impl`` and ``builder`` receive as ``options``. Read-only; ``values.layout``
    and ``values["layout"]`` alike; hashable, so a builder may key a memo on it."""

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, Any]):
        object.__setattr__(self, "_values", dict(values))

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"no option {name!r} (options: {', '.join(self._values) or 'none'})") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("backend options are read-only")

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._values.items())))

    def __repr__(self) -> str:
        return "OptionValues(" + ", ".join(f"{k}={v!r}" for k, v in self._values.items()) + ")"


def defaults(backend: type) -> OptionValues:
    """Every option ``backend`` declares, at its default."""
    return OptionValues({o.name: o.coerce(o.default) for o in getattr(backend, "options", ())})


def choice_variants(backend: type) -> list[dict[str, Any]]:
    """The option values to check ``backend`` with: ``{}`` (every default) first, then each other
    choice of each option that declares choices, alone (the rest at their defaults). What
    ``mixboard check --each-choice`` runs; a vendor's tests may parametrize over it."""
    return [{}] + [{o.name: c} for o in getattr(backend, "options", ()) for c in (o.choices or ()) if c != o.default]


def declaration_problem(backend: type) -> str | None:
    """Why ``backend.options`` is not a valid declaration (the plugin loader's check), or None."""
    options = getattr(backend, "options", ())
    where = f"backend {backend.name!r}"
    if not isinstance(options, tuple):
        return f"{where}: options must be a tuple of mixboard.Option, not {type(options).__name__}"
    seen: set[str] = set()
    for i, option in enumerate(options):
        if not isinstance(option, Option):
            return f"{where}: options[{i}] is {option!r}, not a mixboard.Option"
        problem = _option_problem(option)
        if problem:
            return f"{where}: option {option.name!r}: {problem}"
        if option.name in seen:
            return f"{where}: option {option.name!r} is declared twice"
        seen.add(option.name)
    return None


def _option_problem(option: Option) -> str | None:
    if not isinstance(option.name, str) or not option.name.isidentifier():
        return "its name must be an identifier"
    if option.type not in TYPES:
        return f"type must be bool, int, float or str, not {option.type!r}"
    if not isinstance(option.doc, str) or not option.doc.strip() or "\n" in option.doc:
        return "doc must be one line saying what it changes"
    if option.choices is not None:
        if option.type not in (str, int):
            return "choices are for str and int options"
        if not isinstance(option.choices, tuple) or not option.choices:
            return "choices must be a non-empty tuple"
        if len(set(option.choices)) != len(option.choices):
            return "choices repeat a value"
        bad = [c for c in option.choices if Option(option.name, option.type, c, option.doc).value_problem(c)]
        if bad:
            return f"choice {bad[0]!r} is not of its type ({option.type_name})"
    if option.minimum is not None:
        if option.type not in (int, float) or option.choices is not None:
            return "minimum is for int and float options without choices"
        if Option(option.name, option.type, option.minimum, option.doc).value_problem(option.minimum):
            return f"minimum {option.minimum!r} is not of its type ({option.type_name})"
    problem = option.value_problem(option.default)
    if problem:
        return f"default {option.default!r} is not allowed: {problem.removeprefix(option.name + ' ')}"
    return None
