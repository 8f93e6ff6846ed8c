"""``torch.ops.mixboard_vllm.moe``: the experts taken over (moe.py), one opaque op.

vLLM's CPU runner calls its MoE forward as plain Python, which dynamo traces; the planned backend
must run eagerly every step instead (ops.py says why), so the experts' product is this op. It
finds the layer by name in vLLM's forward context, where vLLM's MoE runner registered itself.
Only platforms without vLLM's own kernel take experts over, and vLLM captures no CUDA graphs
there, so the op need not be a splitting op.
"""

from __future__ import annotations

import torch

from .. import compat

NAME = "moe"


def _moe(x: torch.Tensor, logits: torch.Tensor, out: torch.Tensor, layer_name: str) -> None:
    compat.forward_context_layer(layer_name).routed_experts.mixboard_forward(x, logits, out)


def _moe_fake(x: torch.Tensor, logits: torch.Tensor, out: torch.Tensor, layer_name: str) -> None:
    return None  # writes ``out`` in place


def register() -> None:
    compat.register_op(NAME, _moe, mutates=["out"], fake=_moe_fake)


def moe(x: torch.Tensor, logits: torch.Tensor, out: torch.Tensor, layer_name: str) -> None:
    torch.ops.mixboard_vllm.moe(x, logits, out, layer_name)
