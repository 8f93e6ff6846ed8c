"""Every model type against transformers' own forward, through the registry
and the first-party backends: teacher-forced logits at every position, and
batched generation equal to each prompt alone."""

from __future__ import annotations

import pytest
import torch

from checkpoints import CLASSES, make_checkpoint
from mixboard_runner.engine import Engine
from mixboard_runner.sampling import SamplingParams

MODEL_TYPES = sorted(CLASSES)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    made = {}
    for model_type in MODEL_TYPES:
        directory = tmp_path_factory.mktemp(model_type)
        made[model_type] = (directory, make_checkpoint(model_type, directory))
    return made


def reference_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float()


# The dense ops on the portable PyTorch backends, forced: the model runs the same on them as on the
# default choice (mixboard-cpu's kernels on this CPU), each one held to transformers.
PORTABLE = "linear=linear_torch,rms_norm=rms_norm_torch,rotary=rotary_torch,embedding=embedding_torch,argmax=argmax_torch"


@pytest.mark.parametrize("dense", ["planned", "portable"])
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_score_matches_transformers_at_every_position(checkpoints, model_type, dense):
    directory, reference = checkpoints[model_type]
    rules = PORTABLE if dense == "portable" else ""
    if dense == "portable" and model_type in ("mamba", "mamba2", "nemotron_h", "granitemoehybrid_dense", "jamba"):
        # no rotary (no attention, or attention without positional embedding)
        rules = ",".join(r for r in rules.split(",") if not r.startswith("rotary="))
    engine = Engine(directory, cache_memory=32 * 2**20, backend=rules)
    if dense == "portable":
        assert {layer.backend for layer in engine.plan.layers if layer.selection.rule} >= {"linear_torch",
                                                                                           "rms_norm_torch"}
    torch.manual_seed(1)
    ids = torch.randint(0, 160, (29,)).tolist()
    expected = reference_logits(reference, ids)
    assert expected.abs().max() > 0.1  # the comparison below is not trivially small
    for prefix_len in (0, 13, len(ids)):
        got = engine.score(ids, prefix_len)
        err = (got - expected).abs().max().item()
        assert err <= 1e-4, f"{model_type} prefix_len={prefix_len}: max abs error {err:.2e}"
    assert engine.cache.all_free()


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_batched_greedy_generation_equals_each_prompt_alone(checkpoints, model_type):
    directory, _ = checkpoints[model_type]
    engine = Engine(directory, cache_memory=32 * 2**20, max_batched_tokens=40)  # forces chunked prefills
    torch.manual_seed(2)
    prompts = [torch.randint(0, 160, (n,)).tolist() for n in (1, 3, 7, 12, 20, 33, 48, 5)]
    params = SamplingParams(max_tokens=6, ignore_eos=True)
    together = [o.output_ids for o in engine.generate(prompts, params)]
    alone = [engine.generate([p], params)[0].output_ids for p in prompts]
    assert together == alone
    assert all(len(o) == 6 for o in together)
    assert engine.cache.all_free()



def reference_greedy(model, ids, n):
    # transformers' forward over the whole sequence for each new token: no
    # cache (its bamba generate, with a cache, disagrees with its own forward
    # on the first token for some prompt lengths)
    ids = list(ids)
    for _ in range(n):
        ids.append(reference_logits(model, ids)[-1].argmax().item())
    return ids[-n:]


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_greedy_generation_matches_transformers(checkpoints, model_type):
    # generate samples from the last block's kept rows only (model.Block's rows):
    # its tokens must still be transformers' greedy tokens, prefills chunked or not
    directory, reference = checkpoints[model_type]
    engine = Engine(directory, cache_memory=32 * 2**20, max_batched_tokens=24)
    torch.manual_seed(3)
    prompts = [torch.randint(0, 160, (n,)).tolist() for n in (2, 9, 30, 17)]
    got = [o.output_ids for o in engine.generate(prompts, SamplingParams(max_tokens=5, ignore_eos=True))]
    assert got == [reference_greedy(reference, p, 5) for p in prompts]
    assert engine.cache.all_free()
