"""Layers split by phase run end to end: each mixer kind, and the dense ops, with their decode rows
through one backend and their prefill rows through another, in steps that mix both, generate what
a run on either backend alone generates."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from checkpoints import make_checkpoint
from mixboard import get_registry
from mixboard_runner.engine import Engine
from mixboard_runner.sampling import SamplingParams
from mixboard_runner.sequence import Status

# (model, rules that split, the backend of the decode rows, the backend of the prefill rows, the two
# single-backend runs to compare with)
CASES = {
    "attention": ("llama", "attention@decode=sdpa", "sdpa", "sdpa_cpu", ("attention=sdpa", "attention=sdpa_cpu")),
    "mamba1": ("mamba", "mamba1@decode=mamba1_torch", "mamba1_torch", "mamba1_cpu",
               ("mamba1=mamba1_torch", "mamba1=mamba1_cpu")),
    "mamba2": ("mamba2", "mamba2@prefill=mamba2_torch", "mamba2_cpu", "mamba2_torch",
               ("mamba2=mamba2_torch", "mamba2=mamba2_cpu")),
    "short_conv": ("lfm2", "short_conv@prefill=short_conv_torch", "short_conv_cpu", "short_conv_torch",
                   ("short_conv=short_conv_torch", "short_conv=short_conv_cpu")),
    "dense": ("bamba", "linear@decode=linear_torch,rms_norm@decode=rms_norm_torch,rotary@decode=rotary_torch,"
                       "embedding@decode=embedding_torch,argmax@decode=argmax_torch",
              "linear_torch", "linear_cpu", ("", "linear=linear_torch,rms_norm=rms_norm_torch,rotary=rotary_torch,"
                                                 "embedding=embedding_torch,argmax=argmax_torch")),
}
PROMPT_LENS = (9, 5, 14, 6, 11)
MAX_TOKENS = (3, 8, 5, 7, 4)  # sequences end at different steps, so new prompts join running decodes


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    made = {}
    for model in sorted({case[0] for case in CASES.values()}):
        made[model] = tmp_path_factory.mktemp(model)
        make_checkpoint(model, made[model])
    return made


def generate(directory, rules, steps=None):
    engine = Engine(directory, backend=rules, max_seqs=2, max_batched_tokens=64)
    if steps is not None:  # record each step's (decodes, prefills): the test needs steps that mix them
        schedule = engine.scheduler.schedule

        def recorded():
            batch = schedule()
            decodes = sum(1 for seq, n in batch if n == 1 and seq.num_computed > 0)
            steps.append((decodes, len(batch) - decodes))
            return batch

        engine.scheduler.schedule = recorded
    torch.manual_seed(3)
    seqs = [engine.add(torch.randint(0, 160, (n,)).tolist(), SamplingParams(max_tokens=m, ignore_eos=True))
            for n, m in zip(PROMPT_LENS, MAX_TOKENS)]
    while not all(seq.status is Status.FINISHED for seq in seqs):
        engine.step()
    assert engine.cache.all_free()
    return engine, [seq.output_ids for seq in seqs]


def counting(monkeypatch, backend_name, rows):
    """Record the rows of every call of ``backend_name``'s impls (the real impls still run)."""
    cls = get_registry().backends[backend_name].cls
    make_impl = cls.make_impl

    def counted(spec, env):
        impl = make_impl(spec, env)
        forward = impl.forward

        def forward_counted(*args):
            rows.append(args[0].shape[0])
            return forward(*args)

        impl.forward = forward_counted
        return impl

    monkeypatch.setattr(cls, "make_impl", staticmethod(counted))


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_layer_split_by_phase_generates_what_each_backend_alone_does(checkpoints, monkeypatch, case):
    model, rules, decode_backend, prefill_backend, singles = CASES[case]
    directory = checkpoints[model]
    alone = [generate(directory, single)[1] for single in singles]
    assert alone[0] == alone[1], "the two backends disagree alone: pick a case where they agree"

    decode_rows, prefill_rows, steps = [], [], []
    counting(monkeypatch, decode_backend, decode_rows)
    counting(monkeypatch, prefill_backend, prefill_rows)
    engine, split = generate(directory, rules, steps)
    assert any(layer.split for layer in engine.plan.layers)
    assert any(d and p for d, p in steps), f"no step mixed decodes and prefills: {steps}"
    assert split == alone[0]
    # each backend ran its own phase's rows: decodes are at most max_seqs (2) rows a call, while
    # every prompt is longer; a dense op after the last block's gather sees one row per prefill
    assert decode_rows and prefill_rows
    assert max(decode_rows) <= 2
    if case != "dense":
        assert min(prefill_rows) >= min(PROMPT_LENS)
    else:  # the blocks before the last see whole prompts
        assert max(prefill_rows) >= min(PROMPT_LENS)


def test_explain_shows_both_phases(checkpoints):
    cmd = [sys.executable, "-m", "mixboard_runner", "explain", str(checkpoints["llama"]),
           "--backend", "attention@decode=sdpa"]
    text = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    assert "sdpa_cpu (prefill), sdpa (decode)" in text
    assert "attention@prefill" in text and "attention@decode" in text
    data = json.loads(subprocess.run(cmd + ["--json"], capture_output=True, text=True, check=True).stdout)
    attention = [c for c in data["choices"] if c["kind"] == "attention"]
    assert {(c["phase"], c["backend"], c["rule"]) for c in attention} == {
        ("prefill", "sdpa_cpu", None), ("decode", "sdpa", "attention@decode=sdpa")}
    layer = next(layer for layer in data["layers"] if layer["kind"] == "attention")
    assert layer["backend"] == "sdpa_cpu" and layer["decode"]["backend"] == "sdpa"
