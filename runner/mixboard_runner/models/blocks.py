"""The MLP every architecture with one shares: SwiGLU, down(silu(gate(x)) * up(x))."""

from __future__ import annotations

from torch import nn

from .ops import FusedLinear, Linear, Params


class GatedMLP(nn.Module):
    """gate and up are one gated product (``FusedLinear``), then down. ``names``:
    the checkpoint's names of (gate, up, down) (llama: gate_proj, up_proj,
    down_proj; LFM2: w1, w3, w2)."""

    def __init__(self, layer_name: str, hidden: int, intermediate: int, dtype: str,
                 names=("gate_proj", "up_proj", "down_proj"), bias: bool = False):
        super().__init__()
        gate_name, up_name, down_name = names
        self.gate, self.up = Params(hidden, intermediate, bias), Params(hidden, intermediate, bias)
        self.gate_up = FusedLinear(f"{layer_name}.gate_up_proj", (self.gate, self.up), dtype, gated=True)
        self.down = Linear(f"{layer_name}.{down_name}", intermediate, hidden, dtype, bias)
        self.renames = {"gate": gate_name, "up": up_name, "down": down_name}

    def forward(self, x):
        return self.down(self.gate_up(x))
