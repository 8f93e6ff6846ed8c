"""The built-in kinds. Plugins add more through the ``mixboard_kinds`` hook."""

from .attention import ATTENTION, AttentionImpl, AttentionSpec
from .base import Kind, MixerImpl, MixerSpec, Record, require
from .mamba1 import MAMBA1, Mamba1Impl, Mamba1Spec, Mamba1Weights
from .mamba2 import MAMBA2, Mamba2Impl, Mamba2Spec, Mamba2Weights
from .short_conv import SHORT_CONV, ShortConvImpl, ShortConvSpec, ShortConvWeights

BUILTIN_KINDS = (ATTENTION, MAMBA1, MAMBA2, SHORT_CONV)

__all__ = [
    "BUILTIN_KINDS", "Kind", "MixerImpl", "MixerSpec", "Record", "require",
    "ATTENTION", "AttentionImpl", "AttentionSpec",
    "MAMBA1", "Mamba1Impl", "Mamba1Spec", "Mamba1Weights",
    "MAMBA2", "Mamba2Impl", "Mamba2Spec", "Mamba2Weights",
    "SHORT_CONV", "ShortConvImpl", "ShortConvSpec", "ShortConvWeights",
]
