"""The built-in kinds. Plugins add more through the ``mixboard_kinds`` hook.

Mixer kinds keep per-sequence state (attention, mamba1, mamba2, short_conv);
dense kinds keep none (linear, rms_norm, rotary, embedding, argmax, moe:
the rest of what a model runs, ``op.py``)."""

from .argmax import ARGMAX, ArgmaxImpl, ArgmaxSpec
from .attention import ATTENTION, AttentionImpl, AttentionSpec
from .base import Kind, MixerImpl, MixerSpec, Record, require, spec_class
from .embedding import EMBEDDING, EmbeddingImpl, EmbeddingSpec, EmbeddingWeights
from .linear import LINEAR, LinearImpl, LinearSpec, LinearWeights
from .mamba1 import MAMBA1, Mamba1Impl, Mamba1Spec, Mamba1Weights
from .mamba2 import MAMBA2, Mamba2Impl, Mamba2Spec, Mamba2Weights
from .moe import MOE, MoEImpl, MoESpec, MoEWeights
from .op import NO_STATE, OpImpl
from .rms_norm import RMS_NORM, RMSNormImpl, RMSNormSpec, RMSNormWeights
from .rotary import ROTARY, RotaryImpl, RotarySpec, rotary_scaling
from .short_conv import SHORT_CONV, ShortConvImpl, ShortConvSpec, ShortConvWeights

MIXER_KINDS = (ATTENTION, MAMBA1, MAMBA2, SHORT_CONV)
DENSE_KINDS = (LINEAR, RMS_NORM, ROTARY, EMBEDDING, ARGMAX, MOE)
BUILTIN_KINDS = MIXER_KINDS + DENSE_KINDS
_BY_NAME = {kind.name: kind for kind in BUILTIN_KINDS}


def builtin_kind(name: str) -> Kind | None:
    """The built-in kind of that name; None for any other (a plugin's kinds are the registry's)."""
    return _BY_NAME.get(name)


__all__ = [
    "BUILTIN_KINDS", "builtin_kind", "Kind", "MixerImpl", "MixerSpec", "Record", "require", "spec_class",
    "ATTENTION", "AttentionImpl", "AttentionSpec",
    "MAMBA1", "Mamba1Impl", "Mamba1Spec", "Mamba1Weights",
    "MAMBA2", "Mamba2Impl", "Mamba2Spec", "Mamba2Weights",
    "SHORT_CONV", "ShortConvImpl", "ShortConvSpec", "ShortConvWeights",
    "MIXER_KINDS", "DENSE_KINDS", "NO_STATE", "OpImpl",
    "LINEAR", "LinearImpl", "LinearSpec", "LinearWeights",
    "RMS_NORM", "RMSNormImpl", "RMSNormSpec", "RMSNormWeights",
    "ROTARY", "RotaryImpl", "RotarySpec", "rotary_scaling",
    "EMBEDDING", "EmbeddingImpl", "EmbeddingSpec", "EmbeddingWeights",
    "ARGMAX", "ArgmaxImpl", "ArgmaxSpec",
    "MOE", "MoEImpl", "MoESpec", "MoEWeights",
]
