"""``Engine(backend_options=...)`` end to end on a real checkpoint: the
first-party options reach the layers that run, greedy outputs equal the
default run's, and $MIXBOARD_BACKEND_OPTIONS is the default."""

from __future__ import annotations

import pytest

from checkpoints import make_checkpoint
from mixboard.errors import UsageError
from mixboard_cpu.declarations import LAYOUTS
from mixboard_runner.engine import Engine
from mixboard_runner.sampling import SamplingParams

PROMPTS = [[5, 17, 3, 99, 42, 7], [1, 2, 3]]
PARAMS = SamplingParams(max_tokens=8, ignore_eos=True)
SMALL = 16 * 2**20


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    directory = tmp_path_factory.mktemp("llama")
    make_checkpoint("llama", directory)
    return directory


@pytest.fixture(autouse=True)
def no_options_in_the_environment(monkeypatch):
    monkeypatch.delenv("MIXBOARD_BACKEND_OPTIONS", raising=False)


def _projections(engine):
    """The impls of the layers that run on linear_onednn."""
    return [op.impl for name, op in engine.model.layers().items() if engine.plan.layer(name).backend == "linear_onednn"]


def _chunk_bytes(engine):
    """The decode workspace budget of each sdpa builder (a partial of mixboard_sdpa.meta.build_meta)."""
    return [b.keywords["chunk_bytes"] for b in engine.builders if "chunk_bytes" in getattr(b, "keywords", {})]


def test_every_layout_generates_the_default_runs_greedy_tokens(llama):
    default = Engine(llama, backend="linear=linear_onednn", cache_memory=SMALL)
    assert default.plan.options["linear_onednn"] == {"layout": "packed"}
    want = [o.output_ids for o in default.generate(PROMPTS, PARAMS)]
    fingerprints = {default.plan.fingerprint}
    for layout in LAYOUTS[1:]:
        engine = Engine(llama, backend="linear=linear_onednn", backend_options=f"linear_onednn.layout={layout}",
                        cache_memory=SMALL)
        assert engine.plan.options["linear_onednn"] == {"layout": layout}
        assert _projections(engine) and {impl.layout for impl in _projections(engine)} == {layout}
        assert [o.output_ids for o in engine.generate(PROMPTS, PARAMS)] == want
        fingerprints.add(engine.plan.fingerprint)
    assert len(fingerprints) == len(LAYOUTS)


def test_the_sdpa_workspace_option_reaches_its_builder_and_changes_no_token(llama):
    default = Engine(llama, backend="attention=sdpa", cache_memory=SMALL)
    small = Engine(llama, backend="attention=sdpa", backend_options={"sdpa": {"decode_chunk_mib": 1}},
                   cache_memory=SMALL)
    assert small.plan.options["sdpa"] == {"decode_chunk_mib": 1}
    assert _chunk_bytes(small) == [1 << 20] and _chunk_bytes(default) == [64 << 20]
    assert ([o.output_ids for o in small.generate(PROMPTS, PARAMS)]
            == [o.output_ids for o in default.generate(PROMPTS, PARAMS)])
    assert small.plan.fingerprint != default.plan.fingerprint


def test_the_environment_variable_is_the_default_and_an_argument_replaces_it(llama, monkeypatch):
    monkeypatch.setenv("MIXBOARD_BACKEND_OPTIONS", "linear_onednn.layout=as_loaded")
    engine = Engine(llama, backend="linear=linear_onednn", cache_memory=SMALL)
    assert engine.plan.options["linear_onednn"] == {"layout": "as_loaded"}
    engine = Engine(llama, backend="linear=linear_onednn", backend_options="", cache_memory=SMALL)
    assert engine.plan.options["linear_onednn"] == {"layout": "packed"}


def test_a_bad_option_fails_before_any_weight_is_read(llama):
    with pytest.raises(UsageError, match="layout takes one of packed, as_loaded, column_major, not 'fast'"):
        Engine(llama, backend="linear=linear_onednn", backend_options="linear_onednn.layout=fast")
    with pytest.raises(UsageError, match="backend_options must be text"):
        Engine(llama, backend_options=["linear_onednn.layout=packed"])
    # linear_onednn runs no layer unless forced where linear_cpu's kernel is built; an option for it then is an error
    with pytest.raises(UsageError, match="names backend 'linear_onednn', which no layer of this model runs"):
        Engine(llama, backend="linear=linear_torch", backend_options="linear_onednn.layout=as_loaded")
