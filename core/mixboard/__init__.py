"""mixboard: pluggable backends for the token mixers of hybrid language models.

A layer names its kind (a token mixer, or a dense op: products, norms, rotary,
embedding, argmax); ``get_registry().plan(...)`` picks a backend for every
layer and says why. Plugins register backends through the ``mixboard``
entry-point group (see ``mixboard.hookspecs``).

Importing this package does not import torch; ``CommonBatchMetadata`` (which
needs it) is loaded on first use.
"""

from .backend import ANY_DEVICE, API_VERSION, SUPPORTED_API_VERSIONS, Backend
from .declaration import Declaration
from .devices import Device
from .environment import Environment, detect, simulate
from .errors import MixboardError, PluginError, SelectionError, UsageError
from .hookspecs import hookimpl
from .kinds import (
    ArgmaxImpl, ArgmaxSpec, AttentionImpl, AttentionSpec, EmbeddingImpl, EmbeddingSpec, EmbeddingWeights, Kind,
    LinearImpl, LinearSpec, LinearWeights, Mamba1Impl, Mamba1Spec, Mamba1Weights, Mamba2Impl, Mamba2Spec,
    Mamba2Weights, MixerSpec, MoEImpl, MoESpec, MoEWeights, OpImpl, RMSNormImpl, RMSNormSpec, RMSNormWeights,
    RotaryImpl, RotarySpec, ShortConvImpl, ShortConvSpec, ShortConvWeights,
)
from .options import Option, OptionValues
from .overrides import Overrides
from .plan import Plan
from .registry import Registry, get_registry, reload_registry
from .selection import Selection
from .state import StateSpec, TensorSpec

__version__ = "0.1.0"


def __getattr__(name):
    if name == "CommonBatchMetadata":
        from .metadata import CommonBatchMetadata

        return CommonBatchMetadata
    raise AttributeError(f"module 'mixboard' has no attribute {name!r}")


__all__ = [
    "ANY_DEVICE", "API_VERSION", "SUPPORTED_API_VERSIONS", "Backend", "CommonBatchMetadata", "Declaration",
    "Device", "Environment", "detect", "simulate", "MixboardError", "PluginError", "SelectionError", "UsageError",
    "hookimpl", "Kind", "MixerSpec", "AttentionImpl", "AttentionSpec", "Mamba1Impl", "Mamba1Spec",
    "Mamba1Weights", "Mamba2Impl", "Mamba2Spec", "Mamba2Weights", "ShortConvImpl", "ShortConvSpec",
    "ShortConvWeights", "Overrides", "Plan", "Registry", "get_registry", "reload_registry", "Selection",
    "StateSpec", "TensorSpec", "OpImpl", "LinearImpl", "LinearSpec", "LinearWeights", "RMSNormImpl", "RMSNormSpec",
    "RMSNormWeights", "RotaryImpl", "RotarySpec", "EmbeddingImpl", "EmbeddingSpec", "EmbeddingWeights",
    "ArgmaxImpl", "ArgmaxSpec", "MoEImpl", "MoESpec", "MoEWeights", "Option", "OptionValues",
]
