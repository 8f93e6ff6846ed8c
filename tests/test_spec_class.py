"""``@spec_class`` makes the class ``@dataclass(frozen=True)`` makes: the same ==, hash and repr,
checked against what dataclass itself generates for a twin of each class."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from dataclasses import dataclass, field

import pytest

from mixboard.kinds import BUILTIN_KINDS, AttentionSpec, MixerSpec, spec_class


def twin(cls: type) -> type:
    """The same fields, declared with @dataclass(frozen=True) (the reference)."""
    fields = [(f.name, f.type, field(default=f.default, compare=f.compare, repr=f.repr))
              for f in dataclasses.fields(cls)]
    return dataclasses.make_dataclass(cls.__name__, fields, frozen=True)


@pytest.mark.parametrize("kind", BUILTIN_KINDS, ids=lambda k: k.name)
def test_a_builtin_spec_compares_hashes_and_prints_as_a_dataclass_would(kind):
    spec = kind.default_spec()
    reference = twin(kind.spec)(**{f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)})
    assert repr(spec) == repr(reference).replace(kind.spec.__name__, kind.spec.__qualname__, 1)
    assert hash(spec) == hash(reference)
    changed = dataclasses.replace(spec, dtype="bfloat16")
    assert spec == kind.default_spec() and spec != changed and hash(spec) != hash(changed)
    for back in (pickle.loads(pickle.dumps(spec)), copy.deepcopy(spec)):
        assert back == spec and hash(back) == hash(spec) and repr(back) == repr(spec)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.dtype = "float16"


@dataclass(frozen=True)
class VendorSpec(MixerSpec):
    width: int = 1


@spec_class
class ChildSpec(VendorSpec):
    """Declared with @spec_class below a base declared with @dataclass: its own field must count."""
    depth: int = 1
    note: str = field(default="", compare=False)
    secret: str = field(default="", repr=False)


def test_a_spec_class_below_a_dataclass_base_compares_its_own_fields():
    assert ChildSpec(depth=1) != ChildSpec(depth=2)
    assert hash(ChildSpec(depth=1)) != hash(ChildSpec(depth=2))
    assert ChildSpec(note="a") == ChildSpec(note="b")  # compare=False: not compared, as dataclass does
    assert repr(ChildSpec(note="a", secret="s")) == ("ChildSpec(dtype='float32', width=1, depth=1, note='a')")
    assert ChildSpec() != AttentionSpec() and ChildSpec() != VendorSpec()


def test_a_spec_class_that_writes_its_own_eq_stays_hashable():
    @spec_class
    class Loose(MixerSpec):
        size: int = 1

        def __eq__(self, other):
            return isinstance(other, Loose) and self.size == other.size

    assert Loose(dtype="bfloat16") == Loose() and hash(Loose()) == hash(Loose(size=1))


def test_a_spec_class_that_writes_hash_none_stays_unhashable_as_a_dataclass_would():
    @spec_class
    class Unhashable(MixerSpec):
        __hash__ = None

    with pytest.raises(TypeError):
        hash(Unhashable())
