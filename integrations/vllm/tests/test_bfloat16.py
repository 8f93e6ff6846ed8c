"""vLLM's default (compiled) mode in bfloat16, the dtype models are served in, on llama, the hybrid
(Mamba2 + attention) and LFM2 (short convs + attention), attention on sdpa_cpu's bfloat16 kernel,
Mamba2 on mamba2_cpu's, the short convs on short_conv_cpu's: mixboard's greedy ids equal
vLLM alone's, on prompts whose ids bfloat16 rounding cannot decide (decided.py), in steps that mix
decodes with fresh and chunked prefills. vLLM alone must give the float32 ids there, or the
comparison is not well posed."""

import os

import pytest
import torch

from mixboard import Mamba2Spec
from mixboard.dtypes import dtype_name
from mixboard_vllm.layers.base import state_dtype_fields

from decided import FLOAT32_SSM, decided_prompts, round_to_bf16, ssm_state_in_float32
from harness import ok, run

BF16 = {"enforce_eager": False, "dtype": "bfloat16"}
# transformers in bfloat16 against float32, same weights, moved these checkpoints' logits by at most
# 0.06 (llama), 0.13 (the hybrid: its Mamba2 scan in bfloat16) and 0.011 (LFM2) over 64 prompts of 40 tokens; a
# top-1/top-2 margin moves by at most twice that
MARGIN = 0.4
NEW_TOKENS = 4


@pytest.fixture(scope="module")
def bf16_checkpoint(workdir, checkpoint):
    """name -> (checkpoint with weights rounded to bfloat16, [(prompt, float32 ids)])."""
    from transformers import AutoModelForCausalLM

    made = {}

    def get(name: str):
        if name not in made:
            path = os.path.join(workdir, f"{name}_bf16")
            model = AutoModelForCausalLM.from_pretrained(checkpoint(name), dtype=torch.float32)
            round_to_bf16(model)
            model.save_pretrained(path)
            made[name] = path, decided_prompts(path, vocab=256, new_tokens=NEW_TOKENS, margin=MARGIN,
                                               candidates=1024)
        return made[name]

    return get


@pytest.mark.parametrize("name", ["llama", "granite_hybrid", "lfm2"])
def test_bf16_compiled_ids_equal_vllm_alones(bf16_checkpoint, workdir, name):
    path, chosen = bf16_checkpoint(name)
    prompts = [[p, NEW_TOKENS] for p, _ in chosen]
    theirs = ok(run(workdir, f"{name}_bf16_alone", path, {"MIXBOARD_VLLM": "0"}, BF16, prompts=prompts))
    assert "mixboard-vllm plan" not in theirs.log
    assert theirs.ids == [ids for _, ids in chosen], "vLLM alone parts from float32: MARGIN is too small here"
    ours = ok(run(workdir, f"{name}_bf16", path, extra=BF16, prompts=prompts))
    assert "DYNAMO_TRACE_ONCE" in ours.log, "vLLM did not compile the model"
    assert ours.mixed_steps()
    # the attention layers on the paged kernel's bfloat16 build (the lane builds every kernel)
    assert {backend for kind, backend, _ in ours.table.values() if kind == "attention"} == {"sdpa_cpu"}
    if name == "granite_hybrid":  # Mamba2 in C where vLLM keeps the SSM state in float32 (mamba2_cpu's layout)
        mamba = {backend for kind, backend, _ in ours.table.values() if kind == "mamba2"}
        if ssm_state_in_float32():
            assert FLOAT32_SSM in ours.log and mamba == {"mamba2_cpu"}
        else:
            assert mamba == {"mamba2_torch"}
    if name == "lfm2":  # vLLM keeps the conv states in the model's dtype: short_conv_cpu's bfloat16 build
        assert {backend for kind, backend, _ in ours.table.values() if kind == "short_conv"} == {"short_conv_cpu"}
    assert ours.ids == theirs.ids


@pytest.mark.parametrize("layer, conv_ssm, fields", [
    ("bfloat16", (torch.bfloat16, torch.float32), dict(state_dtype="float32", conv_state_dtype="bfloat16")),  # vLLM's CPU
    ("bfloat16", (torch.bfloat16, torch.bfloat16), dict(state_dtype=None, conv_state_dtype=None)),  # the runner's spec
    ("bfloat16", (torch.float32, torch.bfloat16), dict(state_dtype=None, conv_state_dtype="float32")),
    ("float32", (torch.float32, torch.float16), dict(state_dtype="float16", conv_state_dtype="float32")),
    ("float32", (torch.float16, torch.float16), dict(state_dtype="float16", conv_state_dtype=None)),
])
def test_vllms_state_dtypes_become_the_specs_fields(layer, conv_ssm, fields):
    assert state_dtype_fields(layer, conv_ssm) == fields
    spec = Mamba2Spec(dtype=layer, **fields)
    assert (spec.conv_dtype, spec.ssm_dtype) == tuple(map(dtype_name, conv_ssm))
