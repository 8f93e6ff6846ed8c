"""The causal-conv1d impl: y = C * causal_conv1d(B * x), conv state in slots.

Prefill (and mixed) steps: causal-conv1d's varlen arguments cannot carry a
saved state per sequence (``seq_idx`` takes at most one initial state per
row, and no final states), so every sequence's W - 1 saved inputs are laid
before its tokens in one extended channel-last row (the layout of
``mixboard.ops.causal_conv.ConvIndex``); then every token's window lies
inside its own sequence and one plain ``causal_conv1d_fn`` call serves the
whole step. Decode-only steps: one ``causal_conv1d_update`` that reads and
shifts each sequence's record in the pool in place (``conv_state_indices``).
"""

from __future__ import annotations

import inspect
from typing import Callable, Mapping

import torch

from mixboard.errors import MixboardError
from mixboard.kinds.short_conv import ShortConvImpl, ShortConvSpec, ShortConvWeights
from mixboard.ops.causal_conv import ConvIndex, extend, save_final_state
from mixboard.ops.slot_step import SlotStep

from .inputs import Expected, check_inputs


def load_kernels() -> tuple[Callable, Callable]:
    """causal-conv1d's two entry points, after checking they take what we pass."""
    import causal_conv1d

    fn, update = causal_conv1d.causal_conv1d_fn, causal_conv1d.causal_conv1d_update
    if "conv_state_indices" not in inspect.signature(update).parameters:
        version = getattr(causal_conv1d, "__version__", "unknown")
        raise MixboardError(f"short_conv_cuda: causal-conv1d {version} has no conv_state_indices in "
                            f"causal_conv1d_update; install causal-conv1d>=1.5")
    return fn, update


class ShortConvCudaImpl(ShortConvImpl):
    def __init__(self, spec: ShortConvSpec, conv_fn: Callable, conv_update: Callable):
        self.spec = spec
        self.want = Expected(spec)
        self.conv_fn = conv_fn
        self.conv_update = conv_update

    def forward(self, B: torch.Tensor, C: torch.Tensor, x: torch.Tensor, weights: ShortConvWeights,
                state: Mapping[str, torch.Tensor], meta: SlotStep) -> torch.Tensor:
        meta = SlotStep.of(self.layer_name, meta, self.spec.conv_width)
        pool = check_inputs(self.layer_name, self.want, B, C, x, weights, state, meta)
        if meta.num_tokens == 0:
            return torch.empty_like(x)  # no kernel launch over an empty grid
        bx = B * x
        if meta.all_decodes:
            conv = self.conv_update(bx, pool, weights.conv_weight, weights.conv_bias, activation=None,
                                    conv_state_indices=meta.decode_slots_i32)
        else:
            conv = self._ragged(bx, weights.conv_weight, weights.conv_bias, pool, meta.conv_index)
        return conv.mul_(C)  # conv is a fresh tensor on both paths: gate it in place

    def _ragged(self, bx: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, pool: torch.Tensor,
                index: ConvIndex) -> torch.Tensor:
        ext = extend(bx, pool, index)  # [L, D] contiguous: channel-last once transposed
        out = self.conv_fn(ext.t().unsqueeze(0), weight, bias, activation=None)  # [1, D, L]
        save_final_state(ext, pool, index)
        return out[0].t().index_select(0, index.x_pos)
