"""The routed experts of a sparse MLP: one op of kind ``moe``.

Checkpoints lay the experts out in two ways, and the op reads either: one
3-D tensor per projection (Granite's ``input_linear`` [E, 2I, H] and
``output_linear``), or a module per expert (Jamba's and Nemotron-H's
``experts.{e}.gate_proj`` ...), stacked into the kind's 3-D layout once,
when the op is bound. The shared expert and the residual add stay the
model's."""

from __future__ import annotations

import torch
from torch import nn

from mixboard import MoESpec, MoEWeights

from .ops import Op, Params


class Router(nn.Module):
    """The router's weight [E, H]; ``selection_bias``: the checkpoint's name of the bias added
    to the scores for choosing only (Nemotron-H's e_score_correction_bias), if the model has one."""

    def __init__(self, spec: MoESpec, selection_bias: str | None = None):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(spec.num_experts, spec.hidden_size))
        nn.init.normal_(self.weight, std=0.02)
        self.bias = nn.Parameter(torch.zeros(spec.num_experts)) if spec.router_bias else None
        self.selection_name = selection_bias
        if selection_bias is not None:
            self.register_parameter(selection_bias, nn.Parameter(torch.zeros(spec.num_experts)))

    def selection_bias(self):
        return None if self.selection_name is None else getattr(self, self.selection_name)


class Stacked(nn.Module):
    """One projection of every expert as one tensor, ``weight`` [E, out, in]."""

    def __init__(self, experts: int, out_features: int, in_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(experts, out_features, in_features))
        nn.init.normal_(self.weight, std=0.02)

    def tensor(self):
        return self.weight.detach()


class PerExpert(nn.Module):
    """One projection of every expert, a module each (``experts.{e}.<name>.weight``): ``parts``
    are the projections that make it, cat along rows (gate, then up)."""

    def __init__(self, experts: int, parts: tuple[tuple[str, int], ...], in_features: int):
        super().__init__()
        self.names = [name for name, _ in parts]
        self.experts = nn.ModuleList(
            nn.ModuleDict({name: Params(in_features, rows, bias=False) for name, rows in parts})
            for _ in range(experts))

    def tensor(self):
        return torch.stack([torch.cat([expert[name].weight.detach() for name in self.names]) for expert in self.experts])


class MoE(Op):
    """``router``, ``gate_up`` and ``down``: the three parts, under the checkpoint's names ``names``
    (role -> name; a dotted name nests, Granite's 'router.layer')."""

    kind = "moe"

    def __init__(self, layer_name: str, spec: MoESpec, router: Router, gate_up: nn.Module, down: nn.Module,
                 names: dict[str, str]):
        super().__init__(layer_name, spec)
        self.router, self.gate_up, self.down = router, gate_up, down
        self.renames = names

    @classmethod
    def per_expert(cls, layer_name: str, spec: MoESpec, *, router: str, selection_bias: str | None = None,
                   gate: str | None = "gate_proj", up: str = "up_proj", down: str = "down_proj") -> "MoE":
        """Experts as ``experts.{e}.<gate|up|down>.weight`` (Jamba; Nemotron-H, ungated: ``gate`` None)."""
        i, h, e = spec.intermediate_size, spec.hidden_size, spec.num_experts
        first = ((gate, i), (up, i)) if spec.gated else ((up, i),)
        # the experts' ModuleLists sit at the layer's 'experts' (gate_up's), their down parts beside them
        gate_up, down_part = PerExpert(e, first, h), PerExpert(e, ((down, h),), i)
        return cls(layer_name, spec, Router(spec, selection_bias), gate_up, down_part,
                   {"router": router, "gate_up": "", "down": ""})

    @classmethod
    def stacked(cls, layer_name: str, spec: MoESpec, *, router: str, gate_up: str, down: str) -> "MoE":
        """Experts as one 3-D tensor per projection (Granite: router.layer, input_linear, output_linear)."""
        e, h, i = spec.num_experts, spec.hidden_size, spec.intermediate_size
        return cls(layer_name, spec, Router(spec), Stacked(e, spec.up_rows, h), Stacked(e, h, i),
                   {"router": router, "gate_up": gate_up, "down": down})

    def weights(self):
        return MoEWeights(router=self.router.weight.detach(), router_bias=_detach(self.router.bias),
                          selection_bias=_detach(self.router.selection_bias()), gate_up=self.gate_up.tensor(),
                          down=self.down.tensor())

    def release(self) -> None:
        for module in (self.router, self.gate_up, self.down):
            for name, _ in list(module.named_parameters()):
                owner, _, attr = name.rpartition(".")
                setattr(module.get_submodule(owner) if owner else module, attr, None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.impl.forward(x)


def _detach(t):
    return None if t is None else t.detach()


class SparseMLP(nn.Module):
    """A block's MLP as routed experts, plus a shared expert every token runs through (Nemotron-H,
    Granite) where ``shared`` is given: moe(x) + shared(x). ``names``: the checkpoint's names of
    (moe, shared); "" puts the experts' tensors at the MLP's own level."""

    def __init__(self, moe: MoE, shared: nn.Module | None = None, names: tuple[str, str] = ("", "shared_experts")):
        super().__init__()
        self.moe, self.shared = moe, shared
        self.renames = dict(zip(("moe", "shared"), names))

    def forward(self, x, positions=None, step=None):
        y = self.moe(x)
        return y if self.shared is None else y + self.shared(x)
