"""The ``mamba2_torch`` impl: Mamba-2 in plain PyTorch.

Decodes are one batched state update; each prefill is a chunked SSD scan
(``ssd.py``) from its saved state or zeros. The conv is mixboard's shared
ragged causal conv; the gated RMSNorm follows transformers'
MambaRMSNormGated (skipped with ``gated_norm=False``). The scan runs in
float32 whatever the layer's dtype.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch
from mixboard.kinds.mamba2 import Mamba2Impl, Mamba2Spec, Mamba2Weights
from mixboard.ops.causal_conv import causal_conv1d, causal_conv1d_step
from mixboard.ops.slot_step import SlotStep

from .gated_norm import gated_rmsnorm
from .inputs import InputChecks
from .ssd import discretize, prefill_runs, ssd_decode, ssd_prefill_batch


def conv_weights_as(weights: Mamba2Weights, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The conv weight and bias in the activations' dtype (F.conv1d needs them equal)."""
    weight, bias = weights.conv_weight, weights.conv_bias
    if weight.dtype == dtype and (bias is None or bias.dtype == dtype):
        return weight, bias
    return weight.to(dtype), None if bias is None else bias.to(dtype)


def conv_silu(step: SlotStep, xBC: torch.Tensor, weights: Mamba2Weights, conv_pool: torch.Tensor) -> torch.Tensor:
    """silu(causal conv) of every token of ``step``, the conv states read and written in their slots;
    half-precision activations are summed in float32 (and come back so)."""
    if xBC.dtype in (torch.bfloat16, torch.float16):
        # Summed in the half dtype, each tap's rounding lands on x, B and C, and C . B over 128 states
        # then carries it to outputs 2x past the kit's bfloat16 tolerance; in float32, as causal-conv1d sums.
        xBC = xBC.float()
    conv_weight, conv_bias = conv_weights_as(weights, xBC.dtype)
    if step.num_decodes == step.num_tokens:  # decodes only: one window per sequence, no conv over a sequence
        return causal_conv1d_step(xBC, conv_weight, conv_bias, conv_pool, step.decode_slots, activation="silu",
                                  slot_range=step.decode_range)
    return causal_conv1d(xBC, conv_weight, conv_bias, conv_pool, step.conv_index, activation="silu")


class Mamba2TorchImpl(Mamba2Impl):
    def __init__(self, spec: Mamba2Spec):
        self.spec = spec
        self.check = InputChecks(spec)

    def forward(self, z: torch.Tensor, xBC: torch.Tensor, dt: torch.Tensor, weights: Mamba2Weights,
                state: Mapping[str, torch.Tensor], meta: Any) -> torch.Tensor:
        spec = self.spec
        step = SlotStep.of(self.layer_name, meta, spec.d_conv)
        conv_pool, ssm_pool = self.check(self.layer_name, z, xBC, dt, weights, state, step)
        T, H, P, G, N, DI = step.num_tokens, spec.num_heads, spec.head_dim, spec.n_groups, spec.d_state, spec.d_inner

        xbc = self._conv(step, xBC, weights, conv_pool).float()
        x = xbc[:, :DI].view(T, H, P)
        B = xbc[:, DI:DI + G * N].view(T, G, N)
        C = xbc[:, DI + G * N:].view(T, G, N)

        nd = step.num_decodes
        if nd == T:  # decodes only: the update's output is y
            y = self._decodes(step, x, dt, weights, B, C, ssm_pool)
        else:
            y = torch.empty(T, H, P, dtype=torch.float32, device=xBC.device)
            if nd:
                y[:nd] = self._decodes(step, x[:nd], dt[:nd], weights, B[:nd], C[:nd], ssm_pool)
            # every row's, so that the prefills index dts by token as they index x
            dts = discretize(dt, weights.dt_bias, spec.dt_min, spec.dt_max)
            self._prefills(step, x, dts, weights.A.float(), B, C, ssm_pool, y)
        return self._output(y, x, z, weights, xBC.dtype)

    # The parts ``mamba2_cpu`` replaces with its C kernels where they serve.
    def _decodes(self, step, x, dt, weights, B, C, ssm_pool) -> torch.Tensor:
        """The decode rows' state update, records in their slots: y [num_decodes, H, P] without the D skip.
        dt is the rows' raw dt (before dt_bias, softplus and the clamp)."""
        spec = self.spec
        dts = discretize(dt, weights.dt_bias, spec.dt_min, spec.dt_max)
        return ssd_decode(ssm_pool, step.decode_slots, step.decode_range, x, dts, weights.A.float(), B, C)

    def _conv(self, step, xBC, weights, conv_pool) -> torch.Tensor:
        """silu(causal conv) of every token, the conv states read and written in their slots."""
        return conv_silu(step, xBC, weights, conv_pool)

    def _output(self, y, x, z, weights, dtype) -> torch.Tensor:
        """The D skip, then the gated RMSNorm (with ``gated_norm``; without it, y as it is, the caller gating
        and normalizing it): [T, d_inner] in the layer's dtype."""
        spec = self.spec
        T, DI = y.shape[0], spec.d_inner
        y.addcmul_(weights.D.float().view(1, spec.num_heads, 1), x)
        if not spec.gated_norm:
            return y.view(T, DI).to(dtype)
        return gated_rmsnorm(y.view(T, DI), z, weights.norm_weight, DI // spec.n_groups, spec.norm_eps, dtype)

    def _prefills(self, step, x, dts, A, B, C, ssm_pool, y) -> None:
        """The step's prefills into y (without the D skip), their final states into their slots: the
        chunked SSD scan of ssd.py, sequences of one length batched; ``mamba2_cpu`` overrides it."""
        H, chunk = self.spec.num_heads, self.spec.chunk_size
        for run in prefill_runs(step.prefills, 2 * H * chunk * 4):
            s = slice(run[0].start, run[-1].end)
            initial = None
            if not all(p.fresh for p in run):
                initial = torch.stack([ssm_pool.new_zeros(ssm_pool.shape[1:], dtype=torch.float32) if p.fresh
                                       else ssm_pool[p.slot].float() for p in run])
            y[s], finals = ssd_prefill_batch(x[s], dts[s], A, B[s], C[s], len(run), chunk, initial)
            for p, final in zip(run, finals):
                ssm_pool[p.slot] = final.to(ssm_pool.dtype)
