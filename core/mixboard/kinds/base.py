"""What a kind is: the contract one family of mixers shares.

A kind names a frozen spec class (the static facts selection depends on),
the impl interface a backend's ``make_impl`` returns, and the canonical state
layout. The four built-in kinds live beside this file; a plugin defines more
through the ``mixboard_kinds`` hook.
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Callable

from ..dtypes import DTYPES
from ..state import StateSpec


def spec_class(cls: type) -> type:
    """Make ``cls`` (a subclass of MixerSpec) a kind's spec: the frozen dataclass
    ``@dataclass(frozen=True)`` makes, cheaper to import. Dataclass generates ``repr``, ``==`` and
    hash anew for every class, and every planning process imports every kind (benchmarks/README.md,
    registry); these are written once below and given to each class that does not define its own."""
    cls = dataclass(frozen=True, repr=False, eq=False)(cls)
    fields = dataclasses.fields(cls)
    compared = [f.name for f in fields if f.compare]
    # a tuple of the compared fields' values, as dataclass's == and hash use (attrgetter of one name
    # gives the bare value)
    values = attrgetter(*compared) if len(compared) > 1 else (lambda spec: tuple(getattr(spec, n) for n in compared))
    cls._spec_values = staticmethod(values)
    cls._spec_shown = tuple(f.name for f in fields if f.repr)
    own = dict(cls.__dict__)  # as the class wrote it, before any of the three is set below
    if "__eq__" not in own:
        cls.__eq__ = _spec_eq
    # dataclass's rule: a hash unless the class wrote one, or wrote __hash__ = None without an __eq__
    if "__hash__" not in own or (own["__hash__"] is None and "__eq__" in own):
        cls.__hash__ = _spec_hash
    if "__repr__" not in own:
        cls.__repr__ = _spec_repr
    return cls


# What @dataclass(frozen=True) generates, written once.
def _spec_eq(self, other):
    if other.__class__ is not self.__class__:
        return NotImplemented
    return self._spec_values(self) == self._spec_values(other)


def _spec_hash(self):
    return hash(self._spec_values(self))


def _spec_repr(self) -> str:
    text = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._spec_shown)
    return f"{self.__class__.__qualname__}({text})"


class ConvAndSsmStates:
    """For specs whose state is a conv state and an SSM state (mamba1, mamba2), with fields
    ``state_dtype`` and ``conv_state_dtype``: the dtype each is kept in."""

    @property
    def ssm_dtype(self) -> str:
        """The SSM state's dtype: state_dtype or dtype."""
        return self.state_dtype or self.dtype

    @property
    def conv_dtype(self) -> str:
        """The conv state's dtype: conv_state_dtype or state_dtype or dtype."""
        return self.conv_state_dtype or self.ssm_dtype


@spec_class
class MixerSpec:
    """Base of every kind's spec: frozen, hashable, every field defaulted.

    Subclasses add fields; ``validate`` raises ``ValueError`` with a sentence
    a user can act on. Declare one with ``@dataclass(frozen=True)``
    (``@spec_class``, which the built-in kinds use, makes the same class).
    """

    dtype: str = "float32"

    def __post_init__(self):
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, not {self.dtype!r}")
        # Kinds whose state may be kept in another dtype name it state_dtype (and conv_state_dtype, a
        # conv state's own where it may differ).
        for name in ("state_dtype", "conv_state_dtype"):
            value = getattr(self, name, None)
            if value is not None and value not in DTYPES:
                raise ValueError(f"{name} must be one of {', '.join(DTYPES)} or none, not {value!r}")
        self.validate()

    def validate(self) -> None:
        """Check relations between fields (override in a kind's spec)."""

    def to_dict(self) -> dict[str, Any]:
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            # JSON has no infinity: write it as the string the CLI also accepts.
            out[f.name] = "inf" if isinstance(value, float) and math.isinf(value) else value
        return out

    def canonical(self) -> dict[str, Any]:
        """``to_dict`` with the defaults that follow from other fields filled in, so that two specs that
        mean the same compare equal (a lock written by one engine, read by another). Kinds whose
        defaults depend on other fields override it."""
        return self.to_dict()

    @classmethod
    def field_help(cls) -> dict[str, str]:
        """Field name -> 'type, default' text for --help and error messages."""
        return {f.name: f"{_type_name(f.type)} = {f.default!r}" for f in dataclasses.fields(cls)}

    @classmethod
    def from_strings(cls, values: dict[str, str]) -> "MixerSpec":
        """Build a spec from ``key=value`` text (the CLI's ``--spec``).

        Unknown fields and unparsable values raise ``ValueError`` that names
        the field and what would be right.
        """
        fields = {f.name: f for f in dataclasses.fields(cls)}
        kwargs = {}
        for key, text in values.items():
            if key not in fields:
                raise ValueError(f"unknown spec field {key!r}; fields are {', '.join(fields)}")
            kwargs[key] = _parse(key, _type_name(fields[key].type), text)
        return cls(**kwargs)

def _type_name(annotation) -> str:
    return annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))

def _parse(key: str, type_name: str, text: str):
    optional = type_name.endswith("| None")
    base = type_name.replace("| None", "").strip()
    if optional and text.lower() in ("none", "null", ""):
        return None
    try:
        if base == "int":
            return int(text)
        if base == "float":
            return float(text)
        if base == "bool":
            lowered = text.lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ValueError
        return text
    except ValueError:
        hint = " or none" if optional else ""
        raise ValueError(f"spec field {key!r} takes {base}{hint}, not {text!r}") from None

class MixerImpl(ABC):
    """Base of every kind's impl interface: the rules every kind's ``forward`` shares.

    Lifecycle. ``make_impl(spec, env)`` is called once per layer; the
    caller then sets ``impl.layer_name`` (e.g. "model.layers.3.mixer"), so
    that errors can name the layer. ``builder(spec, env)`` is called once per
    group of layers that share a backend and spec, and the function it
    returns is called once per step with the step's ``CommonBatchMetadata``;
    its result is the ``meta`` of every layer of the group in that step.
    Then, for each layer in model order, under ``torch.inference_mode()``:

        out = impl.forward(*inputs, [weights,] state, meta)

    inputs: the kind's per-token tensors, in the order its ``forward``
        names them, each ``[T, ...]`` with T = ``meta``'s num_tokens: row r
        is the r-th packed token of the step (see CommonBatchMetadata). All
        in the layer's dtype (``spec.dtype``), on one device. The last
        dimension has stride 1; nothing else about strides is promised:
        they may be views into one wider buffer (the slices of a fused
        projection's output), with a row stride larger than the row and a
        nonzero storage offset. Call ``.contiguous()`` where a kernel needs
        it (it copies only what is not).
    weights: the kind's weights record (kinds with weights only): the
        layer's tensors, in the layer's dtype, on the inputs' device. The
        same objects every step, so derived data may be cached on the impl.
    state: ``{name: pool}``, the layer's own pools, laid out as the
        backend's ``state_spec(spec)`` declares (the kind's canonical layout
        unless the backend overrides it): a 'slots' tensor of per-sequence
        shape s is ``[num_slots, *s]``, a 'paged' tensor of per-token shape s
        is ``[num_blocks, block_size, *s]``; in the declared dtype, on the
        inputs' device. Each record (a slot, or a block) is contiguous;
        records are ``stride(0)`` elements apart, which is at least a
        record's size and may be more: an engine's hybrid cache lays each
        record in a larger page (``help(mixboard.state)``). The memory
        between records is not the pool's: never write it, never view the
        pool as flat; address record i at ``i * pool.stride(0)``. Pools are
        never cleared between sequences (the runner zeroes them once, the
        kit fills them with a poison value): a record may hold anything when
        its sequence starts.
    meta: whatever the backend's builder returned for this step (by
        default the ``CommonBatchMetadata`` itself).

    Returns: a new tensor of the kind's output shape, in the layer's dtype,
    on the inputs' device, sharing memory with no input, weight, pool or
    part of ``meta`` (a later layer of the group must not overwrite it).
    Any strides; contiguous is cheapest for the caller.

    May change: the pools' records that the step's sequences own, and
    nothing else (not the memory between records). A sequence owns slot
    ``state_slots[i]`` in 'slots' pools and blocks
    ``block_table[i, :ceil(seq_lens[i] / block_size)]`` in 'paged' pools.
    After the step, a sequence's records must hold what the next step needs
    to continue it (all ``seq_lens[i]`` tokens seen). A sequence with
    ``context_lens == 0`` starts from zero state whatever its records hold.
    Records of sequences not in the step (parked, finished, free) must stay
    bit for bit unchanged, and so must slot/block ids reached only through
    padding. Slot and block ids hold for one step: a runner may move a
    sequence's state to another slot between steps (vLLM does, with prefix
    caching), so read them from each step's metadata and never keep them
    from an earlier step.

    Must not change: the inputs (nor the rest of a buffer they are views
    of), the weights, the ``CommonBatchMetadata`` (every field, host copies
    included), and the public fields of ``meta``: every layer of the group
    gets the same one. A builder's output may keep private fields named
    ``_...`` as a memo or workspace, provided a layer computes the same as
    it would with a fresh meta of its own.

    ``mixboard check BACKEND`` checks each of these rules; the kind's oracle
    in ``mixboard.testing`` is the executable definition of its numbers.
    """

    layer_name: str = "(unnamed layer)"


class Kind:
    """One family of mixers.

    ``state_spec(spec)`` is the canonical state layout: the one the oracle in
    ``mixboard.testing`` uses and the default a backend inherits.
    ``install_hint`` tells a user what to install when no backend of the kind
    is available. ``conformance`` is the kind's conformance adapter (a
    ``mixboard.testing.conformance.KindAdapter``), or better the
    ``"module:NAME"`` it lives at, imported only when the kit runs (so that
    listing and planning never import the kit or torch): with it,
    ``mixboard check`` and ``pytest --mixboard-backend`` serve the kind's
    backends. ``row_inputs``: for each entry point of the impl (``forward``,
    an embedding's ``logits``), how many of its leading arguments are
    per-row tensors ``[T, ...]`` (or None); with it, a runner can run a
    layer's decode rows and its prefill rows through two backends
    (``mixboard.phases``) without knowing the kind. (A plain class, like the weights records below: a dataclass
    costs about a millisecond at import, and every planning process imports
    these.)
    """

    __slots__ = ("name", "spec", "impl", "state_spec", "description", "install_hint", "conformance", "row_inputs")

    def __init__(self, name: str, spec: type, impl: type, state_spec: Callable[[Any], StateSpec], description: str,
                 install_hint: str = "", conformance: Any = None, row_inputs: dict[str, int] | None = None):
        self.name, self.spec, self.impl, self.state_spec = name, spec, impl, state_spec
        self.description, self.install_hint, self.conformance = description, install_hint, conformance
        self.row_inputs = dict(row_inputs or {})

    def default_spec(self):
        return self.spec()

    def __repr__(self) -> str:
        return f"Kind({self.name!r})"


class Record:
    """A fixed set of named fields, given by keyword or in order (a kind's
    weights: ``Mamba1Weights(conv_weight=..., ...)``). Every field is
    required except those a subclass names in ``optional``, which default to
    None (a field added to a kind later, so that existing callers keep
    working)."""

    __slots__ = ()
    optional: tuple[str, ...] = ()

    def __init__(self, *args, **kwargs):
        names = self.__slots__
        if len(args) > len(names):
            raise TypeError(f"{type(self).__name__} takes {len(names)} fields, got {len(args)}")
        values = dict(zip(names, args))
        for key, value in kwargs.items():
            if key not in names or key in values:
                raise TypeError(f"{type(self).__name__}: unexpected or repeated field {key!r}")
            values[key] = value
        missing = [n for n in names if n not in values and n not in self.optional]
        if missing:
            raise TypeError(f"{type(self).__name__} is missing {', '.join(missing)}")
        for name in names:
            object.__setattr__(self, name, values.get(name))

    def replace(self, **changes) -> "Record":
        """A copy with some fields changed."""
        return type(self)(**{**{n: getattr(self, n) for n in self.__slots__}, **changes})

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(self.__slots__)})"


def require(condition: bool, message: str) -> None:
    """Spec validation helper: raise ValueError(message) unless condition holds."""
    if not condition:
        raise ValueError(message)
