"""What a backend states once, in one record: ``mixboard.Declaration``.

A backend class holds code (``check``, ``make_impl``, ...); its facts (name,
kind, priority, devices, dtypes, api_version, options, capture, ...) are one
``Declaration`` in its body. Calling a declaration with more facts gives a new
one, so facts every backend of a plugin shares are written once::

    from mixboard import Backend, Declaration

    PLUGIN = Declaration(devices=("cpu",), dtypes=("float32",), api_version=1)   # once per plugin

    class AcmeLinear(Backend):
        declaration = PLUGIN(name="acme_linear", kind="linear", priority=20,
                             description="ACME's blocked product")

    class AcmeNorm(Backend):
        declaration = PLUGIN(name="acme_rms_norm", kind="rms_norm", priority=20)

``Backend`` copies the facts onto the class when it is created
(``AcmeLinear.priority == 20``), which is where mixboard reads them.

Importing this module imports nothing else of mixboard's.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping

# Every fact a declaration may state; help(mixboard.Backend) says what each means and its default.
FACTS = ("name", "kind", "priority", "devices", "dtypes", "requires", "install_hint", "api_version", "description",
         "tolerances", "expected_failures", "options", "capture")


class Declaration:
    """The facts of one backend (or, before ``name`` and ``kind``, those a plugin's backends share).

    ``Declaration(**facts)`` with keywords from ``FACTS``; ``declaration(**more)``
    is a new declaration with ``more`` added or replaced. Facts left out are
    inherited from the backend's parent class, as attributes are, and from
    ``Backend`` at last (priority 0, capture "never", no options, ...).
    """

    __slots__ = ("facts",)

    def __init__(self, **facts: Any):
        unknown = [name for name in facts if name not in FACTS]
        if unknown:
            from .errors import did_you_mean

            raise TypeError(f"Declaration has no fact {unknown[0]!r}{did_you_mean(unknown[0], FACTS)} "
                            f"(facts: {', '.join(FACTS)})")
        self.facts: Mapping[str, Any] = MappingProxyType(facts)  # read-only: derive, never change

    def __call__(self, **more: Any) -> "Declaration":
        return Declaration(**{**self.facts, **more})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Declaration) and other.facts == self.facts

    __hash__ = None  # facts may hold dicts: compared, never hashed

    def __repr__(self) -> str:
        return "Declaration(" + ", ".join(f"{k}={v!r}" for k, v in self.facts.items()) + ")"


def apply(cls: type) -> None:
    """Copy ``cls.declaration``'s facts onto ``cls`` (Backend does this when a subclass is created).

    A class with a declaration that also sets a fact as an attribute is a
    TypeError: every fact is written in the declaration, once."""
    declaration = vars(cls)["declaration"]
    if not isinstance(declaration, Declaration):
        raise TypeError(f"{cls.__qualname__}.declaration must be a mixboard.Declaration, "
                        f"not {type(declaration).__name__}")
    beside = [name for name in FACTS if name in vars(cls)]
    if beside:
        raise TypeError(f"backend class {cls.__qualname__} sets {', '.join(beside)} as class attributes beside its "
                        f"declaration: state them in the declaration")
    for name, value in declaration.facts.items():
        setattr(cls, name, value)


def declared_by(cls: type) -> Declaration | None:
    """The declaration ``cls`` itself states (not one inherited), or None."""
    declaration = vars(cls).get("declaration")
    return declaration if isinstance(declaration, Declaration) else None
