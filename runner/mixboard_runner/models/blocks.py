"""Feed-forward blocks and the parallel mixer, shared by the architectures.

An MLP reads no positions and keeps no state, so each takes (and ignores)
``positions`` and ``step`` as well: it then fits a block's mixer slot, as in
Nemotron-H, whose MLP layers are blocks of their own."""

from __future__ import annotations

import torch
from torch import nn

from .ops import FusedLinear, Linear, Params


class GatedMLP(nn.Module):
    """SwiGLU, down(silu(gate(x)) * up(x)): gate and up are one gated product (``FusedLinear``),
    then down. ``names``: the checkpoint's names of (gate, up, down) (llama: gate_proj, up_proj,
    down_proj; LFM2: w1, w3, w2)."""

    def __init__(self, layer_name: str, hidden: int, intermediate: int, dtype: str,
                 names=("gate_proj", "up_proj", "down_proj"), bias: bool = False):
        super().__init__()
        gate_name, up_name, down_name = names
        self.gate, self.up = Params(hidden, intermediate, bias), Params(hidden, intermediate, bias)
        self.gate_up = FusedLinear(f"{layer_name}.gate_up_proj", (self.gate, self.up), dtype, gated=True)
        self.down = Linear(f"{layer_name}.{down_name}", intermediate, hidden, dtype, bias)
        self.renames = {"gate": gate_name, "up": up_name, "down": down_name}

    def forward(self, x, positions=None, step=None):
        return self.down(self.gate_up(x))


class SquaredReLUMLP(nn.Module):
    """down(relu(up(x)) ** 2), no gate (Nemotron-H). The square is one elementwise op, left to torch."""

    def __init__(self, layer_name: str, hidden: int, intermediate: int, dtype: str, bias: bool = False):
        super().__init__()
        self.up_proj = Linear(f"{layer_name}.up_proj", hidden, intermediate, dtype, bias)
        self.down_proj = Linear(f"{layer_name}.down_proj", intermediate, hidden, dtype, bias)

    def forward(self, x, positions=None, step=None):
        return self.down_proj(torch.relu(self.up_proj(x)).square())


class ParallelMixers(nn.Module):
    """Several mixers reading the same normed input, their outputs summed (Falcon-H1's
    attention beside Mamba-2). ``mixers``: role -> mixer; ``names``: role -> checkpoint name."""

    def __init__(self, mixers: dict[str, nn.Module], names: dict[str, str]):
        super().__init__()
        for role, mixer in mixers.items():
            self.add_module(role, mixer)
        self.renames = names

    def forward(self, x, positions, step):
        mixers = iter(self.children())
        out = next(mixers)(x, positions, step)
        for mixer in mixers:
            out = out + mixer(x, positions, step)
        return out


class PackedGatedMLP(nn.Module):
    """SwiGLU whose gate and up rows are one stored tensor, gate's first (Granite's shared expert:
    ``input_linear`` [2I, H], then ``output_linear``)."""

    def __init__(self, layer_name: str, hidden: int, intermediate: int, dtype: str,
                 names=("input_linear", "output_linear")):
        super().__init__()
        self.gate_up_rows = Params(hidden, 2 * intermediate, bias=False)
        self.gate_up = FusedLinear(f"{layer_name}.{names[0]}", (self.gate_up_rows,), dtype, gated=True)
        self.down = Linear(f"{layer_name}.{names[1]}", intermediate, hidden, dtype)
        self.renames = {"gate_up_rows": names[0], "down": names[1]}

    def forward(self, x, positions=None, step=None):
        return self.down(self.gate_up(x))


class SigmoidGatedMLP(nn.Module):
    """An MLP whose output is scaled per token by sigmoid(gate(x)), gate a [1, hidden] projection (Qwen3-Next's
    shared expert: ``shared_expert`` and ``shared_expert_gate``)."""

    def __init__(self, layer_name: str, mlp: nn.Module, hidden: int, dtype: str,
                 names=("shared_expert", "shared_expert_gate")):
        super().__init__()
        self.mlp = mlp
        self.gate = Linear(f"{layer_name}.{names[1]}", hidden, 1, dtype)
        self.renames = {"mlp": names[0], "gate": names[1]}

    def forward(self, x, positions=None, step=None):
        return torch.sigmoid(self.gate(x)) * self.mlp(x)
