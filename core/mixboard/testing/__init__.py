"""mixboard's testing kit: plain, obviously-correct reference implementations
("oracles") of the built-in kinds, and the conformance kit that checks
backends against them (``mixboard.testing.conformance``).

Names load on first use, so that importing ``mixboard.testing.pytest_plugin``
(which pytest does in every run once mixboard is installed) costs nothing;
the oracles and the kit import torch.
"""

from importlib import import_module

_ORACLES = ("ORACLES", "AttentionOracle", "Mamba1Oracle", "Mamba2Oracle", "ShortConvOracle", "allocate_state",
            "make_oracle")
_OP_ORACLES = ("OP_ORACLES", "LinearOracle", "RMSNormOracle", "RotaryOracle", "EmbeddingOracle", "ArgmaxOracle",
               "MoEOracle")
_KIT = ("AttentionConformance", "Mamba1Conformance", "Mamba2Conformance", "ShortConvConformance",
        "LinearConformance", "RMSNormConformance", "RotaryConformance", "EmbeddingConformance", "ArgmaxConformance",
        "MoEConformance",
        "ConformanceSuite", "KindAdapter", "OpAdapter", "OpCall", "conformance_suite", "run_suite")

__all__ = [*_ORACLES, *_OP_ORACLES, *_KIT]


def __getattr__(name):
    if name in _ORACLES:
        return getattr(import_module(".oracles", __name__), name)
    if name in _OP_ORACLES:
        return getattr(import_module(".op_oracles", __name__), name)
    if name in _KIT:
        return getattr(import_module(".conformance", __name__), name)
    raise AttributeError(f"module 'mixboard.testing' has no attribute {name!r}")
