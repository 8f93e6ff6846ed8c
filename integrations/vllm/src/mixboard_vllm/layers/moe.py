"""vLLM's routed experts on mixboard's moe kind, where vLLM's own build cannot run them.

vLLM 0.32 runs experts whose activation is not gated (Nemotron-H's relu2) on CUDA, ROCm and XPU
only; its CPU build refuses them as it builds the layer's FusedMoEConfig (compat.py). With
mixboard on, that refusal is lifted for exactly those configurations, and vLLM's RoutedExperts
(a PluggableLayer, replaced by class name) gets a quant method of mixboard's: the same weights as
vLLM's unquantized experts (w13 [E, I, H], w2 [E, H, I]: the kind's gate_up and down as they
are), vLLM's checkpoint loading, and a monolithic apply that hands the rows and vLLM's router
logits to the planned backend (the kind's logits_input). vLLM's runner keeps the rest: its gate,
the shared expert, the latent projections, routed_scaling_factor where the model applies it to
the output. Experts vLLM runs itself (gated ones, any on CUDA) stay vLLM's, as its other dense
ops do."""

from __future__ import annotations

import torch
from vllm.model_executor.layers.fused_moe.fused_moe_method_base import FusedMoEMethodBase
from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts

from mixboard.dtypes import dtype_name

from .. import compat
from ..errors import StartupError
from . import moe_op

GATINGS = {"sigmoid": "sigmoid_topk", "softmax": "softmax_topk"}


class MixboardMoEMethod(FusedMoEMethodBase):
    """The experts' weights as vLLM's unquantized method makes and loads them; the product on mixboard."""

    create_weights = compat.unquantized_expert_weights()

    def get_fused_moe_quant_config(self, layer):
        return None  # nothing quantized

    @property
    def is_monolithic(self) -> bool:
        return True  # vLLM's runner hands over its router logits: routing is the kind's

    def apply_monolithic(self, layer, x, router_logits, input_ids=None):
        out = torch.empty_like(x)
        moe_op.moe(x, router_logits, out, layer.layer_name)
        return out


class MixboardRoutedExperts(RoutedExperts):
    mixboard_kind = "moe"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.runs_on_mixboard = isinstance(self.quant_method, MixboardMoEMethod)
        self._weights_loaded = False
        if self.runs_on_mixboard:
            unsupported = self._unsupported()
            if unsupported:
                _refuse(f"mixboard-vllm: layer {self.layer_name}: experts with {', '.join(unsupported)}, which "
                        f"mixboard's moe kind does not describe, and vLLM's build here has no kernel for their "
                        f"activation ({self.moe_config.activation.value})")

    def _get_quant_method(self, prefix, quant_config, moe_config):
        if compat.vllm_runs_experts(moe_config):
            return super()._get_quant_method(prefix, quant_config, moe_config)
        if quant_config is not None:
            _refuse(f"mixboard-vllm: layer {prefix}: quantized experts ({type(quant_config).__name__}), which mixboard's "
                    f"moe kind does not describe, and vLLM's build here has no kernel for their activation "
                    f"({moe_config.activation.value})")
        return MixboardMoEMethod(moe_config)

    def _unsupported(self) -> list[str]:
        cfg = self.moe_config
        grouped = self.use_grouped_topk and (self.topk_group or 1) < (self.num_expert_group or 1)
        return [why for why, present in (
            (f"activation {cfg.activation.value}", cfg.activation.value != "relu2_no_mul"),
            (f"scoring {self.scoring_func}", self.scoring_func not in GATINGS),
            (f"routing within {self.topk_group} of {self.num_expert_group} expert groups", grouped),
            ("a custom routing function", self.custom_routing_function is not None),
            ("expert biases", cfg.has_bias),
            ("router weights applied on the input", self.apply_router_weight_on_input),
            ("tensor or expert parallelism", cfg.moe_parallel_config.tp_size > 1 or cfg.moe_parallel_config.use_ep),
            ("LoRA", cfg.is_lora_enabled),
        ) if present]

    def mixboard_spec(self):
        from mixboard import MoESpec

        cfg = self.moe_config
        return MoESpec(hidden_size=cfg.hidden_dim, num_experts=cfg.num_experts, top_k=cfg.experts_per_token,
                       intermediate_size=cfg.intermediate_size_per_partition, activation="relu2",
                       gating=GATINGS[self.scoring_func], normalize_topk=bool(self.renormalize),
                       # 1.0 where the model scales the output instead (vLLM's runner does that)
                       routed_scaling=float(self.routed_scaling_factor),
                       selection_bias=self.e_score_correction_bias is not None, logits_input=True,
                       dtype=dtype_name(self.params_dtype))

    def mixboard_forward(self, x: torch.Tensor, logits: torch.Tensor, out: torch.Tensor) -> None:
        """Run by ``torch.ops.mixboard_vllm.moe`` outside any traced graph. Every row vLLM ran
        goes through (padding rows too: the op keeps no state)."""
        if compat.in_dummy_run():  # vLLM's profile, warm-up and dummy runs: shapes only, as the mixers do
            out.zero_()
            return
        from ..plan import process_plan

        impl = process_plan().layer(self.layer_name).impl
        if not self._weights_loaded:  # vLLM has loaded every weight by its first real step
            impl.load(self._mixboard_weights())
            self._weights_loaded = True
        out.copy_(impl.forward(x, logits))

    def _mixboard_weights(self):
        from mixboard import MoEWeights

        # vLLM keeps the choice bias in float32 and routes in float32 (Nemotron-H's gate, its CPU router);
        # rounded to a bfloat16 layer's dtype it could choose other experts
        bias = self.e_score_correction_bias
        return MoEWeights(router=None, router_bias=None,
                          selection_bias=None if bias is None else bias.data.float(),
                          gate_up=self.w13_weight.data, down=self.w2_weight.data)


def _refuse(why: str):
    from ..plan import refused

    raise refused(StartupError(f"{why}; run this model where vLLM's own experts run it (CUDA, ROCm, XPU)"))
