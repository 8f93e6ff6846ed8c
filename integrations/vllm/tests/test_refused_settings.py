"""vLLM settings whose steps mixboard's contract does not describe are refused at start-up, in one
line naming the setting and the fix (refused_settings.py, state.check_slot_state); the checks on
vLLM's own config objects, then two of them through real engines."""

from types import SimpleNamespace

import pytest
import torch
from vllm.config import VllmConfig
from vllm.config.cache import CacheConfig
from vllm.model_executor.layers.mamba.mamba_utils import MambaStateShapeCalculator

from mixboard import AttentionSpec, Mamba2Spec, get_registry
from mixboard.kinds.mamba2 import mamba2_state
from mixboard.state import StateSpec
from mixboard_vllm.errors import StartupError
from mixboard_vllm.refused_settings import check_settings
from mixboard_vllm.state import check_slot_state

from harness import run

ATTN = ("model.layers.0.self_attn.attn", "attention", AttentionSpec(num_heads=4, num_kv_heads=2, head_size=32))
MAMBA2 = ("model.layers.1.mixer", "mamba2", Mamba2Spec(num_heads=8, head_dim=32, d_state=16, n_groups=1))


def settings(speculative=None, v2=False, **cache):
    return SimpleNamespace(speculative_config=speculative, use_v2_model_runner=v2, cache_config=CacheConfig(**cache))


def test_the_v2_refusal_names_what_forces_v2(monkeypatch):
    # vLLM 0.32 runs watermarking and HiSparse on V2 whatever VLLM_USE_V2_MODEL_RUNNER says, so
    # the variable is no fix there; first the fact, read through vLLM's own property
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "0")
    no_hisparse = SimpleNamespace(hisparse_config=None)
    forced = SimpleNamespace(attention_config=no_hisparse, watermark_config=object())
    assert VllmConfig.__dict__["use_v2_model_runner"].fget(forced) is True
    plan = get_registry().plan([ATTN])
    cases = [(dict(watermark_config=object(), attention_config=no_hisparse),
              r"watermarking \(--watermark-config\) runs on V2 only, whatever VLLM_USE_V2_MODEL_RUNNER says: drop it, "),
             (dict(attention_config=SimpleNamespace(hisparse_config=object())),
              r"HiSparse attention \(hisparse_config in --attention-config\) runs on V2 only, whatever "
              r"VLLM_USE_V2_MODEL_RUNNER says: drop it, "),
             (dict(attention_config=SimpleNamespace(hisparse_config=object()), watermark_config=object()),
              r"HiSparse attention \(hisparse_config in --attention-config\) and watermarking \(--watermark-config\) "
              r"run on V2 only, whatever VLLM_USE_V2_MODEL_RUNNER says: drop them, ")]
    for extra, fix in cases:
        with pytest.raises(StartupError, match=r"^mixboard-vllm: vLLM's model runner V2 is not supported: .*; " + fix +
                           r"or set MIXBOARD_VLLM=0 to let vLLM run this model$"):
            check_settings(SimpleNamespace(**vars(settings(v2=True)), **extra), plan)


def test_partial_prefix_hits_are_refused_on_hybrids_only():
    hybrid = get_registry().plan([ATTN, MAMBA2])
    llama = get_registry().plan([ATTN])
    align = dict(block_size=64, mamba_block_size=64, enable_prefix_caching=True, mamba_cache_mode="align")
    check_settings(settings(**align), hybrid)  # hits land on state blocks: their states are saved
    check_settings(settings(**align, prefix_match_unit=64), hybrid)
    check_settings(settings(**align, prefix_match_unit=16), llama)  # no state to save between
    with pytest.raises(StartupError, match=r"^mixboard-vllm: prefix caching with hits every 16 tokens inside "
                                           r"64-token state blocks \(prefix_match_unit=16\): .* set "
                                           r"--prefix-match-unit 64, or turn prefix caching off$"):
        check_settings(settings(**align, prefix_match_unit=16), hybrid)
    with pytest.raises(StartupError, match=r"hits every 32 tokens inside 64-token state blocks \(the gcd of the "
                                           r"32-token attention blocks and the state blocks\)"):
        check_settings(settings(block_size=32, mamba_block_size=64, enable_prefix_caching=True,
                                mamba_cache_mode="align"), hybrid)  # vLLM's default unit: the blocks' gcd


def test_speculative_decoding_is_refused_on_any_model():
    for layers in ([ATTN], [ATTN, MAMBA2]):
        with pytest.raises(StartupError, match=r"^mixboard-vllm: speculative decoding \(ngram\) is not supported"):
            check_settings(settings(speculative=SimpleNamespace(method="ngram")), get_registry().plan(layers))


def test_the_v2_model_runner_is_refused_on_any_model():
    # V2 does not start on this CPU (Triton has no CPU backend here): vLLM's own switch, on settings
    assert isinstance(VllmConfig.__dict__["use_v2_model_runner"], property)  # the name vLLM reads it by
    for layers in ([ATTN], [ATTN, MAMBA2]):
        with pytest.raises(StartupError, match=r"^mixboard-vllm: vLLM's model runner V2 is not supported: .* set "
                                               r"VLLM_USE_V2_MODEL_RUNNER=0 \(the V1 runner\)"):
            check_settings(settings(v2=True), get_registry().plan(layers))
        check_settings(settings(), get_registry().plan(layers))


def test_a_state_vllm_cannot_copy_tensor_by_tensor_is_refused_with_prefix_caching():
    spec = MAMBA2[2]
    shapes = MambaStateShapeCalculator.mamba2_state_shape(1, spec.d_inner, spec.n_groups, spec.num_heads,
                                                          spec.head_dim, spec.d_state, spec.d_conv)
    dtypes = (torch.float32, torch.float32)
    canonical = mamba2_state(spec)
    (conv, ssm) = (t for _, t in canonical.tensors)
    halves = (spec.num_heads // 2, spec.head_dim, spec.d_state)  # the same bytes in one tensor more
    split = StateSpec.slots(conv=(conv.shape, "float32"), ssm_a=(halves, "float32"), ssm_b=(halves, "float32"))
    for align in (False, True):
        check_slot_state("l", "mamba2", "mamba2_cpu", canonical, shapes, dtypes, align)
    check_slot_state("l", "mamba2", "acme", split, shapes, dtypes, align=False)  # vLLM copies nothing then
    with pytest.raises(StartupError, match=r"^mixboard-vllm: layer l: backend acme keeps 3 state tensors where "
                                           r"vLLM's layer keeps 2, .* or turn prefix caching off$"):
        check_slot_state("l", "mamba2", "acme", split, shapes, dtypes, align=True)
    wider = StateSpec.slots(conv=(conv.shape, "float32"), ssm=((spec.num_heads + 1, *ssm.shape[1:]), "float32"))
    with pytest.raises(StartupError, match=r"differs in size from what vLLM sized its pages for"):
        check_slot_state("l", "mamba2", "acme", wider, shapes, dtypes, align=False)


def test_a_state_in_other_dtypes_than_vllms_is_refused_naming_the_settings():
    fp16 = Mamba2Spec(num_heads=8, head_dim=32, d_state=16, n_groups=1, dtype="float16")
    shapes = MambaStateShapeCalculator.mamba2_state_shape(1, fp16.d_inner, fp16.n_groups, fp16.num_heads,
                                                          fp16.head_dim, fp16.d_state, fp16.d_conv)
    state = mamba2_state(fp16)
    check_slot_state("l", "mamba2", "mamba2_torch", state, shapes, (torch.float16, torch.float16), align=False)
    # the same bytes in bfloat16 were taken before without a word: the user's cache dtype ignored
    with pytest.raises(StartupError, match=r"^mixboard-vllm: layer l: vLLM keeps this layer's state in \(bfloat16, "
                                           r"bfloat16\) \(mamba_cache_dtype=bfloat16\), backend mamba2_torch in "
                                           r"\(float16, float16\): give vLLM the backend's \(--mamba-cache-dtype float16 "
                                           r"--mamba-ssm-cache-dtype float16\), or choose a backend that keeps"):
        check_slot_state("l", "mamba2", "mamba2_torch", state, shapes, (torch.bfloat16, torch.bfloat16), False,
                         "mamba_cache_dtype=bfloat16")
    with pytest.raises(StartupError, match=r"state in \(float16, float32\)"):  # two dtypes: not the kind's
        check_slot_state("l", "mamba2", "mamba2_torch", state, shapes, (torch.float16, torch.float32), False)


def test_engines_refuse_them_at_start_up(workdir, checkpoint):
    r = run(workdir, "granite_hybrid_prefix_unit", checkpoint("granite_hybrid"), {},
            {"enable_prefix_caching": True, "prefix_match_unit": 16})
    assert r.rc != 0 and "start-up refused: mixboard-vllm: prefix caching with hits every 16 tokens" in r.log, \
        r.log[-3000:]
    r = run(workdir, "llama_ngram", checkpoint("llama"), {},
            {"speculative_config": {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3,
                                    "prompt_lookup_min": 1}})
    assert r.rc != 0 and "start-up refused: mixboard-vllm: speculative decoding (ngram) is not supported" in r.log, \
        r.log[-3000:]
    # mamba2's spec takes vLLM's state dtypes (test_bfloat16.py); short_conv's keeps the layer's
    r = run(workdir, "lfm2_conv_fp16", checkpoint("lfm2"), {}, {"mamba_cache_dtype": "float16"})
    assert r.rc != 0 and ("start-up refused: mixboard-vllm: layer model.layers.0.short_conv: vLLM keeps this layer's "
                          "state in (float16) (mamba_cache_dtype=float16, ") in r.log, \
        r.log[-3000:]
