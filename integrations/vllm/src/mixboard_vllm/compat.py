"""Every private or version-specific vLLM detail this integration relies on, in one place.

Written against vLLM 0.32 (version.py); paths are relative to site-packages/vllm/. A new vLLM
minor version means re-reading exactly this file.
"""

from __future__ import annotations

from typing import Any, Iterator, NamedTuple

import torch

ATTENTION_BACKEND = "mixboard_vllm.attention.MixboardAttentionBackend"
CUSTOM_ATTENTION_BACKEND = "mixboard_vllm.attention.MixboardCustomAttentionBackend"


def override_attention_backend() -> None:
    """CpuPlatform.get_attn_backend_cls returns CPU_ATTN's path whatever was asked
    (platforms/cpu.py:177), and get_path() honours overrides (registry.py:192): overriding that
    member is the only way in on CPU. On CUDA the platform honours a selected backend, so CUSTOM
    is registered too and the user passes --attention-backend CUSTOM."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    register_backend(AttentionBackendEnum.CPU_ATTN, ATTENTION_BACKEND)
    register_backend(AttentionBackendEnum.CUSTOM, CUSTOM_ATTENTION_BACKEND)


def replace_layer(cls: type, vllm_class_name: str) -> None:
    """PluggableLayer.__new__ looks up op_registry_oot by the *class name* (custom_op.py:46);
    the replacement subclasses vLLM's class so that Python runs its __init__."""
    from vllm.model_executor.custom_op import PluggableLayer

    PluggableLayer.register_oot(cls, name=vllm_class_name)


def mixer_layers(vllm_config) -> Iterator[tuple[str, Any]]:
    """(prefix, module) of every token-mixer layer, in construction order. The forward context
    also holds MoE runners and LoRA layers; mixers are the AttentionLayerBase ones."""
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase

    for name, layer in vllm_config.compilation_config.static_forward_context.items():
        if isinstance(layer, AttentionLayerBase):
            yield name, layer


def on_mixer_layer_built(check) -> None:
    """``check(layer)`` for every vLLM mixer layer (AttentionLayerBase) as its model assigns it,
    in each process that builds a model: torch's global submodule-registration hook (public API).
    This path runs whatever backend vLLM chose, so a layer vLLM would run itself is seen even
    when no mixboard builder ever is (on CUDA without --attention-backend CUSTOM, or a model
    that hands Attention its own backend class)."""
    from torch.nn.modules.module import register_module_module_registration_hook
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase

    def hook(module, name, submodule):
        if isinstance(submodule, AttentionLayerBase):
            check(submodule)

    register_module_module_registration_hook(hook)


def layer_name(layer) -> str:
    """vLLM's prefix of a mixer layer: Attention keeps it as layer_name, the Mamba layers as prefix."""
    return getattr(layer, "layer_name", None) or getattr(layer, "prefix", None) or type(layer).__name__


def attention_backend_name(layer) -> str | None:
    backend = getattr(layer, "attn_backend", None)
    return backend.get_name() if backend is not None else None


def keep_raw_weights(*modules) -> None:
    """vLLM CPU repacks linear (and bf16 conv) weights after loading and replaces ``weight`` with
    an empty tensor (model_executor/layers/utils.py:470-600); mixboard's kinds read them raw."""
    for module in modules:
        module._cpu_skip_gemm_dispatch = True


def decodes_first(builder) -> None:
    """Ask vLLM to order each batch decode -> short extend -> long extend -> fresh prefill
    (v1/attention/backends/utils.py:905): mixboard's decodes-first order. No spec decode."""
    builder._init_reorder_batch_threshold(1, supports_spec_as_decode=False)


class StepBatch(NamedTuple):
    """What mixboard reads of vLLM's CommonAttentionMetadata (v1/attention/backend.py:387)."""
    num_reqs: int
    num_tokens: int  # vLLM's num_actual_tokens: rows past it are padding
    query_start_loc: torch.Tensor  # device, [num_reqs + 1]
    query_start_loc_cpu: torch.Tensor
    seq_lens: torch.Tensor  # device, [num_reqs]
    seq_lens_cpu: torch.Tensor
    block_table: torch.Tensor  # device, [num_reqs, max blocks]
    slot_mapping: torch.Tensor  # device, [num_tokens]


def _rows(t: torch.Tensor, n: int) -> torch.Tensor:
    return t if t.shape[0] == n else t[:n]  # vLLM's tensors are often exactly this long: no view to make


def step_batch(cm) -> StepBatch:
    n, T = cm.num_reqs, cm.num_actual_tokens
    seq = _rows(cm.seq_lens, n)
    if seq.device.type == "cpu":
        seq_cpu = seq
    elif cm.seq_lens_cpu_upper_bound is not None:
        # exact without async speculative decoding, which the builders refuse (decodes_first)
        seq_cpu = _rows(cm.seq_lens_cpu_upper_bound, n)
    else:  # not kept on this path: one synchronisation
        seq_cpu = seq.cpu()
    return StepBatch(n, T, _rows(cm.query_start_loc, n + 1), _rows(cm.query_start_loc_cpu, n + 1), seq, seq_cpu,
                     _rows(cm.block_table_tensor, n), _rows(cm.slot_mapping, T))


def state_slots(cm, kv_cache_spec, vllm_config):
    """Each request's state slot this step. Mode 'none': its one block; 'align' (prefix caching on
    hybrids): the block of its last token, which vLLM fills before the step (v1/worker/mamba_utils.py)."""
    from vllm.v1.attention.backends.utils import mamba_get_block_table_tensor

    mode = vllm_config.cache_config.mamba_cache_mode
    idx = mamba_get_block_table_tensor(cm.block_table_tensor, cm.seq_lens, kv_cache_spec, mode)
    return idx[:, 0] if idx.dim() == 2 else idx


def step_metadata(prefix: str):
    """This layer's metadata for the current step, None in vLLM's profile and dummy runs."""
    from vllm.forward_context import get_forward_context

    raw = get_forward_context().attn_metadata
    return raw.get(prefix) if isinstance(raw, dict) else None


def current_vllm_config():
    from vllm.config import get_current_vllm_config

    return get_current_vllm_config()


def current_vllm_config_or_none():
    """The config vLLM is building a model under, or None (a layer made outside vLLM's model loading)."""
    from vllm.config.vllm import get_current_vllm_config_or_none

    return get_current_vllm_config_or_none()


def rank_world() -> tuple[int, int]:
    from vllm.distributed.parallel_state import get_world_group, model_parallel_is_initialized

    if not model_parallel_is_initialized():
        return 0, 1
    group = get_world_group()
    return group.rank_in_group, group.world_size


def pipeline_stage() -> int:
    """This rank's pipeline stage (0 without pipeline parallelism): ranks of one stage hold the
    same layers, each stage other ones."""
    from vllm.distributed.parallel_state import get_pp_group, model_parallel_is_initialized

    return get_pp_group().rank_in_group if model_parallel_is_initialized() else 0


def world_cpu_group():
    """vLLM's gloo group over every rank of this engine (parallel_state.py:1492)."""
    from vllm.distributed.parallel_state import get_world_group

    return get_world_group().cpu_group


def tp_size(vllm_config) -> int:
    return vllm_config.parallel_config.tensor_parallel_size


def mamba_chunk_size(model_config) -> int:
    return model_config.get_mamba_chunk_size()


def base_mamba_kv_cache_spec(layer, vllm_config):
    """MambaMixer2's own spec promises in-forward prefill checkpoints for prefix caching
    (mamba_mixer2.py:1098), which a mixboard kind cannot export; MambaBase's makes the scheduler
    split prefills at block boundaries instead."""
    from vllm.model_executor.layers.mamba.abstract import MambaBase

    return MambaBase.get_kv_cache_spec(layer, vllm_config)


# --- compiled mode -------------------------------------------------------------------------------

OP_LIBRARY = "mixboard_vllm"  # torch.ops.mixboard_vllm.*
ATTENTION_OP = "vllm::unified_attention_with_output"  # Attention.forward's op, which calls our impl
_library = None  # torch's Library must outlive its ops
_defined: dict[str, bool] = {}  # op name -> whether it breaks CUDA-graph capture (breakable graphs)


def register_op(name: str, fn, *, mutates: list[str], fake) -> None:
    """Register ``fn`` as ``mixboard_vllm::name`` for this platform's dispatch key with vLLM's own
    helper (utils/torch_utils.py:1068), as vLLM registers its mixer ops; once per process. Where
    vLLM breaks CUDA graphs at such ops while capturing (compilation/breakable_cudagraph.py: the
    wrapper reads VLLM_USE_BREAKABLE_CUDAGRAPH as it wraps), the op breaks them too."""
    global _library
    if name in _defined:
        return
    from torch.library import Library
    from vllm.compilation.breakable_cudagraph import eager_break_during_capture
    from vllm.utils.torch_utils import direct_register_custom_op

    breaks = breakable_graphs()
    if _library is None:
        _library = Library(OP_LIBRARY, "FRAGMENT")
    direct_register_custom_op(op_name=name, op_func=eager_break_during_capture(fn), mutates_args=mutates,
                              fake_impl=fake, target_lib=_library)
    _defined[name] = breaks


def op_breaks_graphs(name: str) -> bool:
    """Whether the op was registered to break a breakable CUDA-graph capture."""
    return _defined.get(name, False)


def breakable_graphs() -> bool:
    from vllm.compilation.breakable_cudagraph import is_breakable_cudagraph_enabled

    return is_breakable_cudagraph_enabled()


def forward_context_layer(name: str):
    """The layer vLLM registered under ``name`` (its prefix), as vLLM's own mixer ops find theirs."""
    from vllm.forward_context import get_forward_context

    return get_forward_context().no_compile_layers[name]


def split_graph_at(qualified_op: str) -> None:
    """Make ``qualified_op`` one of the ops vLLM splits its graph at when it captures piecewise
    CUDA graphs: CompilationConfig copies this class list when the user gave no splitting_ops
    (config/compilation.py:768, 1177)."""
    from vllm.config.compilation import CompilationConfig

    if qualified_op not in CompilationConfig._attention_ops:
        CompilationConfig._attention_ops.append(qualified_op)


def graph_splits(vllm_config) -> tuple[bool, list[str]]:
    """(does vLLM capture piecewise CUDA graphs between splitting ops here, the splitting ops).
    Full graphs are vLLM's to resolve with what the builders support (never ALWAYS): FULL becomes
    FULL_AND_PIECEWISE only where the splitting ops hold every op of its attention list, mixboard's
    among them (split_graph_at), and FULL_DECODE_ONLY otherwise (config/compilation.py:1388)."""
    cc = vllm_config.compilation_config
    mode = cc.cudagraph_mode
    piecewise = mode is not None and mode.has_piecewise_cudagraphs()
    return piecewise, list(cc.splitting_ops or [])


def captures_cuda_graphs(vllm_config) -> bool:
    """False where vLLM's ``cudagraph_mode`` is already NONE when the plan is made: final on a
    platform without static graphs (CPU: config/vllm.py resolves it before the workers) and under
    enforce_eager. On CUDA the worker may still lower it to NONE from what the builders support
    (compilation.py, resolve_cudagraph_mode_and_sizes), which vLLM logs itself."""
    return bool(vllm_config.compilation_config.cudagraph_mode)  # CUDAGraphMode is false for NONE alone


def compiles(vllm_config) -> bool:
    from vllm.config.compilation import CompilationMode

    return vllm_config.compilation_config.mode != CompilationMode.NONE


def mark_compile_cache(vllm_config, marker: str) -> bool:
    """vLLM reuses a compiled model from its cache by the config's hash and the traced files
    (compilation/decorators.py:560, caching.py:572): a graph compiled without mixboard (whose
    mixer ops run vLLM's own kernels on any layer of the right name) would be loaded with mixboard
    on, and the other way round. ``additional_config`` is part of that hash (config/vllm.py:549).
    Returns False where it cannot be marked (a platform's own additional_config object) and vLLM
    would still reuse compiled models."""
    import vllm.envs as envs

    extra = vllm_config.additional_config
    if isinstance(extra, dict):
        extra["mixboard_vllm"] = marker
        return True
    return not compiles(vllm_config) or bool(envs.VLLM_DISABLE_COMPILE_CACHE)


# --- experts (layers/moe.py) -----------------------------------------------------------------------

_experts_refusal_lifted = False


def vllm_runs_experts(moe_config) -> bool:
    """Whether vLLM's own experts run this configuration here: FusedMoEConfig.__post_init__ refuses
    experts without a gated activation except on CUDA, ROCm and XPU (fused_moe/config.py:1398)."""
    from vllm.platforms import current_platform

    return moe_config.is_act_and_mul or current_platform.is_cuda_alike() or current_platform.is_xpu()


def lift_experts_refusal() -> None:
    """Let FusedMoEConfig be made for experts vLLM cannot run here, so that its RoutedExperts (ours,
    replace_layer) can run them on mixboard. The refusal is the last statement of __post_init__ in
    vLLM 0.32 (fused_moe/config.py:1398): swallowing exactly that error leaves the config as vLLM
    would have made it. Once per process."""
    global _experts_refusal_lifted
    if _experts_refusal_lifted:
        return
    from vllm.model_executor.layers.fused_moe.config import FusedMoEConfig

    vllms = FusedMoEConfig.__post_init__

    def post_init(self):
        try:
            vllms(self)
        except NotImplementedError as exc:
            if vllm_runs_experts(self):
                raise
            # kept, for experts of a class of their own that mixboard does not take over (unclaimed_experts)
            self.mixboard_lifted_refusal = str(exc)

    FusedMoEConfig.__post_init__ = post_init
    _refuse_unclaimed_experts_as_vllm_does()
    _experts_refusal_lifted = True


def _refuse_unclaimed_experts_as_vllm_does() -> None:
    """Experts of a model's own RoutedExperts subclass, which mixboard does not take over, get vLLM's
    unquantized method (fused_moe/unquantized_fused_moe_method.py:52), which finds no kernel for them
    on this build; the user then sees vLLM's own refusal, the one the config kept, not the method's
    vaguer "no backend supports the deployment configuration"."""
    from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import UnquantizedFusedMoEMethod

    vllms = UnquantizedFusedMoEMethod.__init__

    def init(self, moe, *args, **kwargs):
        try:
            vllms(self, moe, *args, **kwargs)
        except NotImplementedError:
            lifted = getattr(moe, "mixboard_lifted_refusal", None)
            if lifted is None:
                raise
            raise NotImplementedError(lifted) from None

    UnquantizedFusedMoEMethod.__init__ = init


def unquantized_expert_weights():
    """vLLM's unquantized experts' create_weights (fused_moe/unquantized_fused_moe_method.py:68): it
    reads only ``self.moe``, and makes w13 [E, I or 2I, H] and w2 [E, H, I] with vLLM's loaders."""
    from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import UnquantizedFusedMoEMethod

    return UnquantizedFusedMoEMethod.create_weights


def taken_over_experts(vllm_config) -> Iterator[tuple[str, Any]]:
    """(prefix, RoutedExperts) of every MoE layer whose experts run on mixboard: vLLM's MoE runners
    register in the forward context under their prefix (fused_moe/runner/moe_runner.py:59)."""
    for name, layer in vllm_config.compilation_config.static_forward_context.items():
        experts = getattr(layer, "routed_experts", None)
        if getattr(experts, "runs_on_mixboard", False):
            yield name, experts


def unclaimed_experts(vllm_config) -> Iterator[tuple[str, str, str]]:
    """(prefix, class, vLLM's refusal) of every MoE layer whose refusal was lifted but whose experts
    mixboard does not run: a model's own RoutedExperts subclass is not replaced by class name. vLLM's
    unquantized method refuses those as it is made (_refuse_unclaimed_experts_as_vllm_does); this names
    any that another method let through."""
    for name, layer in vllm_config.compilation_config.static_forward_context.items():
        experts = getattr(layer, "routed_experts", None)
        refusal = getattr(getattr(experts, "moe_config", None), "mixboard_lifted_refusal", None)
        if refusal and not getattr(experts, "runs_on_mixboard", False):
            yield name, type(experts).__name__, refusal


def in_dummy_run() -> bool:
    """vLLM's profile, warm-up and dummy runs carry no attention metadata."""
    from vllm.forward_context import get_forward_context

    return get_forward_context().attn_metadata is None
