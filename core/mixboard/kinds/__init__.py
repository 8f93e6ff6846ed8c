"""The built-in kinds. Plugins add more through the ``mixboard_kinds`` hook."""

from .attention import ATTENTION, AttentionImpl, AttentionSpec
from .base import Kind, MixerImpl, MixerSpec, Record, require
from .mamba1 import MAMBA1, Mamba1Impl, Mamba1Spec, Mamba1Weights
from .mamba2 import MAMBA2, Mamba2Impl, Mamba2Spec, Mamba2Weights
from .short_conv import SHORT_CONV, ShortConvImpl, ShortConvSpec, ShortConvWeights

BUILTIN_KINDS = (ATTENTION, MAMBA1, MAMBA2, SHORT_CONV)
_BY_NAME = {kind.name: kind for kind in BUILTIN_KINDS}


def builtin_kind(name: str) -> Kind | None:
    """The built-in kind of that name; None for any other (a plugin's kinds are the registry's)."""
    return _BY_NAME.get(name)


__all__ = [
    "BUILTIN_KINDS", "builtin_kind", "Kind", "MixerImpl", "MixerSpec", "Record", "require",
    "ATTENTION", "AttentionImpl", "AttentionSpec",
    "MAMBA1", "Mamba1Impl", "Mamba1Spec", "Mamba1Weights",
    "MAMBA2", "Mamba2Impl", "Mamba2Spec", "Mamba2Weights",
    "SHORT_CONV", "ShortConvImpl", "ShortConvSpec", "ShortConvWeights",
]
