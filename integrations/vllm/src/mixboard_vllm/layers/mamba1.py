"""vLLM's MambaMixer on mixboard's mamba1 kind: in_proj -> (x, z) -> backend -> out_proj.
vLLM's CPU build has no selective scan (_C.selective_scan_fwd): through this, Mamba1 runs there."""

from __future__ import annotations

import torch
from vllm.model_executor.layers.mamba.mamba_mixer import MambaMixer

from mixboard.dtypes import dtype_name

from .. import compat, ops
from .base import MixboardLayer, state_dtype_fields


class MixboardMambaMixer(MixboardLayer, MambaMixer):
    mixboard_kind = "mamba1"
    unsupported_fix = ("on CUDA or ROCm set MIXBOARD_VLLM=0 to let vLLM run this model; vLLM's CPU build has no Mamba1 "
                       "of its own, so on CPU it runs only through mixboard (one rank, no LoRA)")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        compat.keep_raw_weights(self.conv1d, self.x_proj, self.dt_proj)
        self._mixboard_init([why for why, present in (
            (f"activation {self.activation}", self.activation != "silu"),
            # x_proj is row-parallel: the kind would need an all-reduce inside it
            ("tensor parallelism", compat.tp_size(compat.current_vllm_config()) > 1),
            ("LoRA", bool(self.is_lora_enabled)),
        ) if present])

    def _spec(self):
        from mixboard import Mamba1Spec

        dtype = dtype_name(self.model_config.dtype)
        return Mamba1Spec(d_inner=self.intermediate_size, d_state=self.ssm_state_size, d_conv=self.conv_kernel_size,
                          dt_rank=self.time_step_rank, conv_bias=self.conv1d.bias is not None, dtype=dtype,
                          **state_dtype_fields(dtype, self.vllm_state_dtypes()), **self._norm_fields())

    def _norm_fields(self):
        """Jamba's dt/B/C RMSNorms, which the kind applies (dt_bc_norms): their epsilon."""
        if not self.use_rms_norm:
            return {}
        return dict(dt_bc_norms=True, norm_eps=self.dt_layernorm.variance_epsilon)

    def _mixboard_weights(self):
        if self._weights is None:
            from mixboard import Mamba1Weights

            w = self.conv1d.weight
            self._weights = Mamba1Weights(
                conv_weight=w.view(w.size(0), w.size(2)), conv_bias=self.conv1d.bias,
                x_proj_weight=self.x_proj.weight, dt_proj_weight=self.dt_proj.weight,
                dt_proj_bias=self.dt_proj.bias, A=self.A, D=self.D,  # A float32, as vLLM keeps it
                # ones where the checkpoint's norms have no weight (rms_norm_has_weight=False)
                **({f"{part}_norm_weight": getattr(self, f"{part}_layernorm").weight.data for part in ("dt", "b", "c")}
                   if self.use_rms_norm else {}))
        return self._weights

    def _kind_inputs(self, p):
        DI = p.shape[-1] // 2
        return p[:, :DI], p[:, DI:]

    def forward(self, hidden_states: torch.Tensor, output: torch.Tensor):
        projected = self.in_proj(hidden_states)[0]
        y = projected.new_empty(projected.shape[0], projected.shape[-1] // 2)
        ops.mixer(projected, y, self.prefix)
        output[: projected.shape[0]] = self.out_proj(y)[0]
