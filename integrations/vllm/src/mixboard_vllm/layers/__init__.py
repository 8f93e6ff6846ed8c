"""vLLM's slot-state layers, and the experts its build cannot run, taken over by class name
(compat.replace_layer)."""

from __future__ import annotations


def register_layers() -> list[str]:
    from .. import compat
    from . import moe_op
    from .gdn import MixboardGatedDeltaNet
    from .mamba1 import MixboardMambaMixer
    from .mamba2 import MixboardMambaMixer2
    from .moe import MixboardRoutedExperts
    from .short_conv import MixboardShortConv

    compat.replace_layer(MixboardMambaMixer2, "MambaMixer2")
    compat.replace_layer(MixboardMambaMixer, "MambaMixer")
    compat.replace_layer(MixboardShortConv, "ShortConv")
    compat.replace_layer(MixboardGatedDeltaNet, "QwenGatedDeltaNetAttention")
    # experts only where vLLM's build cannot run them (layers/moe.py)
    compat.lift_experts_refusal()
    compat.replace_layer(MixboardRoutedExperts, "RoutedExperts")
    moe_op.register()
    return ["mamba2", "mamba1", "short_conv", "gated_delta_net", "moe (experts vLLM's build cannot run)"]
