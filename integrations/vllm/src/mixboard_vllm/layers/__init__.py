"""vLLM's slot-state layers, taken over by class name (compat.replace_layer)."""

from __future__ import annotations


def register_layers() -> list[str]:
    from .. import compat
    from .gdn import MixboardGatedDeltaNet
    from .mamba1 import MixboardMambaMixer
    from .mamba2 import MixboardMambaMixer2
    from .short_conv import MixboardShortConv

    compat.replace_layer(MixboardMambaMixer2, "MambaMixer2")
    compat.replace_layer(MixboardMambaMixer, "MambaMixer")
    compat.replace_layer(MixboardShortConv, "ShortConv")
    compat.replace_layer(MixboardGatedDeltaNet, "QwenGatedDeltaNetAttention")
    return ["mamba2", "mamba1", "short_conv", "gated_delta_net"]
