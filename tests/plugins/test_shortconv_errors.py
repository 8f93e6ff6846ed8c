"""Bad input to short_conv_torch: an error that names the layer, what was
expected and what arrived; and nothing written to the state."""

from __future__ import annotations

import re

import pytest
import torch

from mixboard import CommonBatchMetadata, ShortConvSpec, ShortConvWeights, simulate
from mixboard.kinds.short_conv import short_conv_state
from mixboard.ops.checks import BackendInputError, build_impl
from mixboard.testing import allocate_state
from mixboard_shortconv import ShortConvTorch

LAYER = "model.layers.7.conv"
SPEC = ShortConvSpec(hidden_size=16, conv_width=3)
CPU = simulate("cpu")


def good_call():
    meta = CommonBatchMetadata.build([1, 4], [3, 0], [0, 2], [[0], [1]], block_size=64)
    B, C, x = torch.randn(5, 48).chunk(3, dim=1)
    return dict(B=B, C=C, x=x, weights=ShortConvWeights(torch.randn(16, 3), None),
                state=allocate_state(short_conv_state(SPEC), 4), meta=meta)


def call(**changes):
    args = good_call()
    args.update(changes)
    impl = build_impl(ShortConvTorch, SPEC, CPU, LAYER)
    meta = ShortConvTorch.builder(SPEC, CPU)(args.pop("meta"))
    before = {k: v.clone() for k, v in args["state"].items() if isinstance(v, torch.Tensor)}
    try:
        return impl.forward(meta=meta, **args)
    except BackendInputError:
        for name, pool in before.items():  # a refused call leaves the state as it was
            assert torch.equal(args["state"][name], pool)
        raise


def test_good_call_runs():
    assert call().shape == (5, 16)


@pytest.mark.parametrize("changes, message", [
    (dict(x=torch.randn(5, 12)), "x must have shape [5, 16], got [5, 12]"),
    (dict(x=torch.randn(4, 16)), "x must have shape [5, 16], got [4, 16]"),
    (dict(B=torch.randn(5, 16, 1)), "B must have shape [5, 16], got [5, 16, 1]"),
    (dict(C=torch.randn(5, 16, dtype=torch.float64)), "C must be torch.float32, got torch.float64"),
    (dict(x=torch.randn(5, 16).bfloat16()), "x must be torch.float32, got torch.bfloat16"),
    (dict(B=torch.empty(5, 16, device="meta")), "B must be on cpu, got meta"),
    (dict(weights=ShortConvWeights(torch.randn(16, 4), None)), "conv_weight must have shape [16, 3], got [16, 4]"),
    (dict(weights=ShortConvWeights(torch.randn(16, 3), torch.randn(16))),
     "the spec has conv_bias=False but weights.conv_bias is set"),
    (dict(weights=(torch.randn(16, 3), None)), "weights must be a ShortConvWeights, got tuple"),
    (dict(state={}), "state is missing conv (has nothing)"),
    (dict(state={"ssm": torch.zeros(4, 16, 2)}), "state is missing conv (has ssm)"),
    (dict(state={"conv": torch.zeros(4, 16, 3)}), "state['conv'] must have shape [*, 16, 2], got [4, 16, 3]"),
    (dict(state={"conv": torch.zeros(4, 16, 2, dtype=torch.float16)}),
     "state['conv'] must be torch.float32, got torch.float16"),
    (dict(state={"conv": torch.zeros(16, 2).expand(4, 16, 2)}),  # every slot the same memory
     "state['conv'] must be [num_records, 16, 2] with each record contiguous and records at least one record "
     "apart (stride(0) >= 32), got strides [0, 2, 1]"),
    (dict(meta=CommonBatchMetadata.build([1, 4], [3, 0], [0, 7], [[0], [1]], 64)),
     "state slot [0, 7] out of range: the pool has 4 slots"),
    (dict(meta=CommonBatchMetadata.build([1, 4], [3, 0], [2, 2], [[0], [1]], 64)),
     "state slot 2 is given to more than one sequence of the step (slots [2, 2]); each sequence needs its own"),
])
def test_bad_input_names_the_layer_and_what_was_expected(changes, message):
    with pytest.raises(BackendInputError, match=re.escape(f"{LAYER}: {message}")):
        call(**changes)


def test_decode_path_checks_too():
    meta = CommonBatchMetadata.build([1, 1], [3, 5], [1, 9], [[0], [1]], block_size=64)
    B, C, x = torch.randn(2, 48).chunk(3, dim=1)
    with pytest.raises(BackendInputError, match=re.escape(f"{LAYER}: state slot [1, 9] out of range")):
        call(meta=meta, B=B, C=C, x=x)


def test_meta_is_the_builders_output_or_the_steps_metadata():
    args = good_call()
    impl = build_impl(ShortConvTorch, SPEC, CPU, LAYER)
    assert impl.forward(**args).shape == (5, 16)  # the common metadata, planned on the spot
    with pytest.raises(BackendInputError, match=f"{LAYER}: meta must be what this backend's builder returns"):
        impl.forward(**{**args, "meta": {"num_tokens": 5}})
    wider = ShortConvTorch.builder(ShortConvSpec(hidden_size=16, conv_width=4), CPU)(args["meta"])
    with pytest.raises(BackendInputError, match=f"{LAYER}: meta was planned for conv width 4, the layer's is 3"):
        impl.forward(**{**args, "meta": wider})
