"""mixboard's testing kit: plain, obviously-correct reference implementations
("oracles") of the built-in kinds, which backends are checked against.

Importing this package imports torch.
"""

from .oracles import (
    ORACLES, AttentionOracle, Mamba1Oracle, Mamba2Oracle, ShortConvOracle, allocate_state, make_oracle,
)

__all__ = ["ORACLES", "AttentionOracle", "Mamba1Oracle", "Mamba2Oracle", "ShortConvOracle", "allocate_state", "make_oracle"]
