"""The ``moe_triton`` impl: ``moe_torch``'s routing (float32, torch), the experts' products in ``_moe.py``.

Routing is a [T, experts] softmax or sigmoid and a sort: small, and what
torch does well on every device. The products over the (token, expert)
pairs, grouped by expert, are the kernels'; a token's weighted sum over its
experts is in float32, cast to the layer's dtype once.
"""

from __future__ import annotations

import torch

from mixboard.torch_ops.moe import MoETorchImpl

from ._moe import run_experts


class MoETritonImpl(MoETorchImpl):
    def load(self, weights) -> None:
        super().load(weights)
        # the kernels address every weight as [experts, rows, cols] with cols contiguous, in the layer's dtype
        self.gate_up = self.gate_up.to(self.dtype).contiguous()
        self.down = self.down.to(self.dtype).contiguous()

    def forward(self, x: torch.Tensor, logits: torch.Tensor | None = None) -> torch.Tensor:
        if x.shape[0] == 0:  # a step with no rows here (a last block whose prompts all go on)
            return x.new_empty(0, self.spec.hidden_size)
        x = x if x.stride(-1) == 1 else x.contiguous()
        # logits: the caller's router logits where the layer takes them (logits_input); routed as moe_torch does
        experts, weights = self.route(x) if logits is None else self.route(x, logits)
        return run_experts(x, experts, weights, self.gate_up, self.down, gated=self.spec.gated).to(x.dtype)
