"""Attention features that mixboard's attention kind does not describe are refused when the plan
is made, by layer, in one line (attention.attention_spec): on mixboard's own impl built with the
arguments vLLM's Attention layer passes, then one of them through an engine."""

from types import SimpleNamespace

import pytest
import torch
from vllm.v1.attention.backend import AttentionType

from mixboard_vllm.attention import MixboardAttentionImpl, attention_spec
from mixboard_vllm.errors import StartupError

from harness import run

NAME = "model.layers.0.self_attn.attn"


def layer(head_size_v=64, **impl_args):
    impl = MixboardAttentionImpl(4, 64, 0.125, 2, **impl_args)
    return SimpleNamespace(impl=impl, dtype=torch.float32, head_size_v=head_size_v)


def test_what_the_kind_describes_becomes_its_spec():
    spec = attention_spec(NAME, layer(sliding_window=128, logits_soft_cap=30.0))
    assert (spec.num_heads, spec.num_kv_heads, spec.head_size, spec.sliding_window, spec.logits_soft_cap,
            spec.dtype) == (4, 2, 64, 128, 30.0, "float32")


@pytest.mark.parametrize("args, said", [
    (dict(alibi_slopes=torch.ones(4)), "ALiBi"),
    (dict(kv_cache_dtype="fp8"), "kv_cache_dtype=fp8"),
    (dict(attn_type=AttentionType.ENCODER_ONLY), "attention type"),
    (dict(kv_sharing_target_layer_name="model.layers.1.self_attn.attn"), "cross-layer KV sharing"),
    (dict(sinks=torch.zeros(4)), "sinks"),  # an argument vLLM passes that mixboard does not know
    (dict(head_size_v=128), "value heads of 128 beside key heads of 64"),
])
def test_what_it_does_not_is_refused_by_layer_in_one_line(args, said):
    with pytest.raises(StartupError) as refusal:
        attention_spec(NAME, layer(**args))
    line = str(refusal.value)
    assert line.startswith(f"mixboard-vllm: layer {NAME} uses ") and said in line and "\n" not in line, line
    assert line.endswith("which mixboard's attention kind does not describe; set MIXBOARD_VLLM=0 to let vLLM "
                         "run this model"), line


def test_an_engine_with_an_fp8_kv_cache_is_refused_at_start_up(workdir, checkpoint):
    # vLLM's CPU attention keeps an fp8 cache itself; mixboard's attention kind keeps the model's dtype
    r = run(workdir, "llama_fp8_kv", checkpoint("llama"), {}, {"kv_cache_dtype": "fp8"})
    assert r.rc != 0 and r.ids is None
    assert f"start-up refused: mixboard-vllm: layer {NAME} uses kv_cache_dtype=fp8, which mixboard's attention " \
           "kind does not describe" in r.log, r.log[-3000:]
