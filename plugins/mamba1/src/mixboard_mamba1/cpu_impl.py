"""The ``mamba1_cpu`` impl: ``mamba1_torch``'s, with a step of decodes only
run by the C kernel (``_decode_step.c``) in one call. The kernel takes each
pool's record stride, so slots that sit in larger pages (an engine's hybrid
cache) are updated in place too. A bfloat16 layer's x and z are widened to
float32 copies for the kernel (a decode step's rows: small) and its output
narrowed once; its conv pool may be bfloat16 (step_bf16), its SSM pool is
float32."""

from __future__ import annotations

import torch

from mixboard.ops.checks import record_stride
from mixboard.ops.slot_step import SlotStep

from .scan import LOG2E
from .torch_impl import Mamba1TorchImpl

from . import _decode_step  # noqa: E402  (after torch: the kernel then shares torch's OpenMP runtime)


# the kernel's entry per conv pool dtype (the SSM pool is float32)
STEP_OVER = {torch.float32: _decode_step.step, torch.bfloat16: _decode_step.step_bf16}
SERVED = (torch.float32, torch.bfloat16)  # layer dtypes


class Mamba1CpuImpl(Mamba1TorchImpl):
    _prepared: tuple[object, tuple[torch.Tensor, ...]] | None = None

    def forward(self, x, z, weights, state, meta):
        spec, layer = self.spec, self.layer_name
        meta = SlotStep.of(layer, meta, spec.d_conv)
        conv, ssm = state.get("conv"), state.get("ssm")
        if not (meta.all_decodes and x.dtype in SERVED and isinstance(conv, torch.Tensor)
                and isinstance(ssm, torch.Tensor) and conv.dtype in STEP_OVER and ssm.dtype == torch.float32):
            return super().forward(x, z, weights, state, meta)
        self.check(layer, x, z, weights, state, meta)  # records contiguous, strides at least a record (the contract)
        conv_w, conv_b, xproj_t, dt_p, dt_b, A2, skip, *norm_weights = self._weights(weights)
        norms = [w.data_ptr() for w in norm_weights] if spec.dt_bc_norms else [0, 0, 0]  # 0: no norms
        dtype = x.dtype
        x, z = _rows(x.float()), _rows(z.float())  # no copy in float32
        n, D = x.shape
        y = torch.empty(n, D)
        if n:
            slots = meta.decode_slots.contiguous()
            STEP_OVER[conv.dtype](
                x.data_ptr(), x.stride(0), z.data_ptr(), z.stride(0), n, D, spec.d_state, spec.dt_rank, spec.d_conv,
                conv_w.data_ptr(), 0 if conv_b is None else conv_b.data_ptr(), xproj_t.data_ptr(), dt_p.data_ptr(),
                dt_b.data_ptr(), A2.data_ptr(), skip.data_ptr(), conv.data_ptr(),
                record_stride(conv, D * (spec.d_conv - 1)), ssm.data_ptr(), record_stride(ssm, D * spec.d_state),
                slots.data_ptr(), y.data_ptr(), y.stride(0), *norms, spec.norm_eps)
        return y.to(dtype)

    def _weights(self, weights):
        """The layouts the kernel reads, made once per weights record (frozen, so they cannot go stale)."""
        if self._prepared is None or self._prepared[0] is not weights:
            def f32(t):
                return None if t is None else t.detach().float().contiguous()

            self._prepared = (weights, (
                f32(weights.conv_weight), f32(weights.conv_bias), f32(weights.x_proj_weight.t()),
                _panels(f32(weights.dt_proj_weight)), f32(weights.dt_proj_bias), f32(weights.A.float() * LOG2E),
                f32(weights.D),
                *(f32(getattr(weights, n)) for n in ("dt_norm_weight", "b_norm_weight", "c_norm_weight"))))
        return self._prepared[1]


def _panels(w: torch.Tensor) -> torch.Tensor:
    """[D, R] -> [ceil(D / 16), R, 16], zero-padded: the kernel reads 16 channels' weights for one r at once."""
    d, r = w.shape
    padded = torch.zeros(-(-d // 16) * 16, r)
    padded[:d] = w
    return padded.view(-1, 16, r).transpose(1, 2).contiguous()


def _rows(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()
