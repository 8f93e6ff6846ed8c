from __future__ import annotations

import math

import pytest

from mixboard import AttentionSpec, Mamba1Spec, Mamba2Spec, ShortConvSpec, UsageError, simulate
from mixboard.environment import parse_capability, resolve
from mixboard.kinds import BUILTIN_KINDS
from mixboard.kinds.mamba2 import mamba2_state


def test_specs_are_frozen_hashable_and_defaulted():
    for kind in BUILTIN_KINDS:
        a, b = kind.default_spec(), kind.default_spec()
        assert a == b and hash(a) == hash(b)
        with pytest.raises(AttributeError):
            a.dtype = "float16"


def test_spec_from_strings_parses_types():
    spec = Mamba2Spec.from_strings({"num_heads": "8", "n_groups": "2", "dt_max": "inf", "conv_bias": "false",
                                    "state_dtype": "float32", "norm_eps": "1e-6"})
    assert (spec.num_heads, spec.n_groups, spec.conv_bias, spec.norm_eps) == (8, 2, False, 1e-6)
    assert math.isinf(spec.dt_max) and spec.to_dict()["dt_max"] == "inf"
    spec = AttentionSpec.from_strings({"sliding_window": "none", "logits_soft_cap": "30", "scale": "0.125"})
    assert (spec.sliding_window, spec.logits_soft_cap, spec.softmax_scale) == (None, 30.0, 0.125)
    assert AttentionSpec(head_size=64).softmax_scale == 0.125


def test_mamba2_gated_norm_parses_from_text_and_without_it_norm_eps_means_nothing():
    spec = Mamba2Spec.from_strings({"gated_norm": "false", "norm_eps": "1e-6"})
    assert spec.gated_norm is False and Mamba2Spec().gated_norm is True
    with pytest.raises(ValueError, match="spec field 'gated_norm' takes bool, not 'maybe'"):
        Mamba2Spec.from_strings({"gated_norm": "maybe"})
    # canonical (what a lock compares): every norm_eps is one spec without the norm, and none is dropped with it
    assert spec != Mamba2Spec(gated_norm=False) and spec.canonical() == Mamba2Spec(gated_norm=False).canonical()
    assert spec.canonical()["norm_eps"] is None and spec.to_dict()["norm_eps"] == 1e-6
    assert Mamba2Spec(norm_eps=1e-6).canonical() != Mamba2Spec().canonical()
    assert Mamba2Spec().canonical() == {**Mamba2Spec().to_dict(), "state_dtype": "float32", "conv_state_dtype": "float32"}


def test_mamba2_state_dtypes_follow_from_each_other():
    # conv_state_dtype None: the SSM state's; state_dtype None: the layer's. A lock compares them filled in
    bf16 = dict(dtype="bfloat16")
    assert Mamba2Spec(**bf16).canonical() == Mamba2Spec(**bf16, state_dtype="bfloat16",
                                                        conv_state_dtype="bfloat16").canonical()
    assert Mamba2Spec(**bf16, state_dtype="float32").canonical() == Mamba2Spec(
        **bf16, state_dtype="float32", conv_state_dtype="float32").canonical()
    vllm_cpu = Mamba2Spec(**bf16, state_dtype="float32", conv_state_dtype="bfloat16")
    assert vllm_cpu.canonical() != Mamba2Spec(**bf16, state_dtype="float32").canonical()
    assert [(name, t.dtype) for name, t in mamba2_state(vllm_cpu).tensors] == [("conv", "bfloat16"), ("ssm", "float32")]
    with pytest.raises(ValueError, match="conv_state_dtype must be one of float32, bfloat16, float16, float64 or none, "
                                         "not 'int8'"):
        Mamba2Spec(conv_state_dtype="int8")


@pytest.mark.parametrize("cls, values, message", [
    (AttentionSpec, {"heads": "8"}, "unknown spec field 'heads'"),
    (AttentionSpec, {"num_heads": "eight"}, "takes int, not 'eight'"),
    (AttentionSpec, {"causal": "maybe"}, "takes bool"),
    (AttentionSpec, {"num_heads": "6", "num_kv_heads": "4"}, "must be a multiple of num_kv_heads"),
    (AttentionSpec, {"dtype": "float8"}, "dtype must be one of"),
    (Mamba1Spec, {"d_conv": "1"}, "at least 2"),
    (Mamba2Spec, {"num_heads": "6", "n_groups": "4"}, "multiple of n_groups"),
    (ShortConvSpec, {"state_dtype": "int8"}, "state_dtype must be one of"),
])
def test_spec_errors_name_the_field(cls, values, message):
    with pytest.raises(ValueError, match=message):
        cls.from_strings(values)


def test_canonical_state_specs():
    attn = AttentionSpec(num_kv_heads=2, num_heads=4, head_size=16, dtype="bfloat16")
    state = BUILTIN_KINDS[0].state_spec(attn)
    assert state.layout == "paged" and state.record_bytes() == 2 * (2 * 16 * 2)
    m2 = Mamba2Spec(num_heads=4, head_dim=8, d_state=16, n_groups=2, d_conv=4, state_dtype="float32", dtype="bfloat16")
    state = BUILTIN_KINDS[2].state_spec(m2)
    assert state.to_dict() == {"layout": "slots", "tensors": {
        "conv": {"shape": [4 * 8 + 2 * 2 * 16, 3], "dtype": "float32"},
        "ssm": {"shape": [4, 8, 16], "dtype": "float32"}}}


def test_environment_simulation_and_errors():
    env = simulate("cuda", "9.0")
    assert env.capability == (9, 0) and env.to_dict()["capability"] == "9.0"
    assert resolve(None, "8.6") == simulate("cuda", "8.6")
    assert resolve("cpu").device == "cpu"
    with pytest.raises(UsageError, match="bad capability '9'"):
        parse_capability("9")
    with pytest.raises(UsageError, match="unknown device 'gpu'"):
        simulate("gpu")
    with pytest.raises(UsageError, match="applies to device cuda"):
        simulate("cpu", "8.0")


def test_detected_environment_on_this_machine():
    import torch

    env = resolve()
    assert env.torch_version == torch.__version__
    assert env.device == ("cuda" if torch.cuda.is_available() else env.device)
    if env.device == "cuda":  # NVIDIA: sm_XY and its capability; ROCm: gfx name, no capability
        assert (env.runtime, env.capability is None) in (("cuda", False), ("rocm", True)) and env.arch
    if env.device == "cpu":
        assert env.runtime is None and env.arch is None and env.capability is None


def test_weights_records_require_every_field_and_copy_with_replace():
    from mixboard import ShortConvWeights

    w = ShortConvWeights(conv_weight=1, conv_bias=None)
    assert (w.conv_weight, w.conv_bias) == (1, None)
    assert w.replace(conv_bias=2).conv_bias == 2 and w.conv_bias is None
    with pytest.raises(TypeError, match="missing conv_bias"):
        ShortConvWeights(conv_weight=1)
    with pytest.raises(TypeError, match="unexpected or repeated field 'bias'"):
        ShortConvWeights(conv_weight=1, conv_bias=None, bias=3)
