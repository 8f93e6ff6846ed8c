"""What every taken-over slot-state layer shares: its plan row, the state vLLM allocates for it,
and its metadata backend. The per-kind files only translate fields, weights and in_proj."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from mixboard.dtypes import dtype_name

from .. import compat
from ..errors import StartupError
from ..plan import process_plan, refused
from ..state import PoolViews, check_slot_state, slot_pools


def state_dtype_fields(layer_dtype: str, vllm_dtypes) -> dict:
    """The spec fields (``state_dtype``, ``conv_state_dtype``) of a Mamba layer whose states vLLM
    keeps in ``vllm_dtypes`` (its layer's ``get_state_dtype()``: conv, SSM): set from
    --mamba-cache-dtype, --mamba-ssm-cache-dtype, or vLLM's CPU platform, which keeps the SSM
    state in float32. Named only where they differ from what they default to, so that the spec,
    and the plan's fingerprint, are the runner's otherwise."""
    conv, ssm = map(dtype_name, vllm_dtypes[:2])
    state_dtype = None if ssm == layer_dtype else ssm
    return dict(state_dtype=state_dtype, conv_state_dtype=None if conv == (state_dtype or layer_dtype) else conv)


class MixboardLayer:
    """Mixin placed before vLLM's layer class: vLLM's constructor, parameters, loaders and TP
    sharding stay; what lies between in_proj and out_proj runs on the planned backend."""

    mixboard_kind: ClassVar[str]
    _unsupported: list[str]

    def _mixboard_init(self, unsupported: list[str]) -> None:
        self._vllm_config = compat.current_vllm_config()
        self._unsupported = unsupported
        self._bound = None
        self._weights = None
        self._pools = PoolViews(slot_pools)

    # what to do instead; a kind whose vLLM layer cannot run everywhere says so (mamba1.py)
    unsupported_fix: ClassVar[str] = "set MIXBOARD_VLLM=0 to let vLLM run this model"

    def mixboard_spec(self) -> Any:
        if self._unsupported:
            raise StartupError(f"mixboard-vllm: layer {self.prefix} uses {', '.join(self._unsupported)}, which "
                               f"mixboard's {self.mixboard_kind} kind does not describe; {self.unsupported_fix}")
        return self._spec()

    def _mb(self):
        if self._bound is None:
            self._bound = process_plan(self._vllm_config).layer(self.prefix)
        return self._bound

    def get_state_shape(self):
        bound = self._mb()
        cache = self._vllm_config.cache_config
        settings = (f"mamba_cache_dtype={cache.mamba_cache_dtype}, "
                    f"mamba_ssm_cache_dtype={cache.mamba_ssm_cache_dtype}")
        try:
            check_slot_state(self.prefix, self.mixboard_kind, bound.backend, bound.state_spec,
                             super().get_state_shape(), self.vllm_state_dtypes(), cache.mamba_cache_mode == "align",
                             settings)
        except StartupError as exc:
            raise refused(exc) from None  # its line of its own, as the plan's refusals
        return tuple(tuple(t.shape) for _, t in bound.state_spec.tensors)

    def vllm_state_dtypes(self) -> tuple:
        """The dtypes vLLM's own layer keeps its states in (conv first): what it sized the pages for,
        from --mamba-cache-dtype, --mamba-ssm-cache-dtype and the platform (the class after this
        mixin answers; ``get_state_dtype`` below answers with the plan's)."""
        return super().get_state_dtype()

    def get_state_dtype(self):
        return tuple(getattr(torch, t.dtype) for _, t in self._mb().state_spec.tensors)

    def get_attn_backend(self):
        from ..slots import MixboardSlotsBackend

        return MixboardSlotsBackend

    def mixboard_mix(self, projected: torch.Tensor, output: torch.Tensor) -> None:
        """The kind's boundary, run by ``torch.ops.mixboard_vllm.mixer`` (ops.py) outside any traced
        graph: ``projected`` is in_proj's output, ``output`` the rows out_proj reads. Rows past
        the step's tokens are vLLM's padding and get zeros."""
        md = compat.step_metadata(self.prefix)
        if md is None:  # vLLM's profile, warm-up and dummy runs: shapes only
            output.zero_()
            return
        bound = self._mb()
        T = md.common.num_tokens
        y = bound.impl.forward(*self._kind_inputs(projected[:T]), self._mixboard_weights(),
                               self._pools(self.kv_cache, bound), md.metas[bound.group])
        output[:T].copy_(y)
        if T < output.shape[0]:
            output[T:].zero_()

