"""mixboard.capture: the levels a backend declares, the loader's check of the
declaration, ``weakest`` for an engine's plan, and ``refill``, which copies a
new step's builder output into a recorded one's tensors or says why a replay
is impossible."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from functools import cached_property

import pytest
import torch

from mixboard import Backend, CommonBatchMetadata
from mixboard.capture import ANY, LEVELS, NEVER, UNIFORM_DECODE, refill, weakest
from toy_sources import backend_class, plugin


def test_levels_weakest_first():
    assert LEVELS == (NEVER, UNIFORM_DECODE, ANY) == ("never", "uniform_decode", "any")
    assert Backend.capture == NEVER  # the default: eager every step
    assert weakest([ANY, UNIFORM_DECODE, ANY]) == UNIFORM_DECODE
    assert weakest([UNIFORM_DECODE, NEVER]) == NEVER
    assert weakest(level for level in [ANY]) == ANY
    assert weakest([]) == ANY  # no backend limits the graph


def test_weakest_names_the_levels_for_an_unknown_one():
    with pytest.raises(ValueError, match=r"^capture must be one of never, uniform_decode, any, not 'uniform'; "
                                         r"did you mean 'uniform_decode'\?$"):
        weakest([ANY, "uniform"])


def _load(distributions, declaration: str):
    source = plugin(backend_class("Bad", "bad_attn", extra=declaration), backend_class("Good", "good_attn"))
    distributions.add("acme-capture", "1.0", {"acme": "acme_capture"}, {"acme_capture.py": source})
    loaded = distributions.load()
    (record,) = [p for p in loaded.plugins if p.name == "acme"]
    return loaded, record


@pytest.mark.parametrize("level", LEVELS)
def test_a_valid_declaration_registers(distributions, level):
    loaded, record = _load(distributions, f"    capture = {level!r}")
    assert record.status == "ok" and record.errors == []
    assert loaded.backends["bad_attn"].cls.capture == level
    assert loaded.backends["good_attn"].cls.capture == NEVER


@pytest.mark.parametrize("declaration, cause", [
    ('    capture = "full"', "backend 'bad_attn': capture must be one of never, uniform_decode, any, not 'full' "
                            "(how far its forward may be captured in a graph)"),
    ('    capture = "decode"', "not 'decode'; did you mean"),
    ("    capture = True", "capture must be one of never, uniform_decode, any, not True (how far"),
])
def test_an_unknown_level_is_a_plugin_fault(distributions, declaration, cause):
    loaded, record = _load(distributions, declaration)
    assert record.status == "error"
    assert any(cause in e for e in record.errors), record.errors
    assert all("\n" not in e for e in record.errors)  # one line
    assert "bad_attn" not in loaded.backends and "good_attn" in loaded.backends


def test_importing_mixboard_or_the_levels_does_not_import_torch():
    code = "import sys, mixboard, mixboard.capture; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --------------------------------------------------------------------------- refill


def _step(context_lens, slots, tables, query_lens=None):
    query_lens = query_lens or [1] * len(context_lens)
    return CommonBatchMetadata.build(query_lens, context_lens, slots, tables, 4)


def test_refill_copies_every_tensor_of_the_common_metadata_in_place():
    recorded = _step([3, 6], [2, 3], [[1, 0, 0], [2, 5, 0]])
    tensors = {f.name: getattr(recorded, f.name) for f in dataclasses.fields(recorded)
               if isinstance(getattr(recorded, f.name), torch.Tensor)}
    new = _step([8, 1], [7, 4], [[6, 9, 3, 0], [8]])  # 4 columns: an engine pads its tables to one width
    assert refill(recorded, new) == ["meta.block_table: shape [2, 3] recorded, [2, 4] now",
                                     "meta.block_table_cpu: shape [2, 3] recorded, [2, 4] now"]
    assert recorded.seq_lens.tolist() == [4, 7]  # nothing copied when a replay is impossible

    new = _step([8, 1], [7, 4], [[6, 9, 3], [8, 0, 0]])
    assert refill(recorded, new) == []
    for name, tensor in tensors.items():
        assert getattr(recorded, name) is tensor  # the same tensors, new values
        assert torch.equal(tensor, getattr(new, name)), name
    assert recorded.seq_lens.tolist() == [9, 2] and recorded.state_slots.tolist() == [7, 4]
    assert recorded.max_seq_len == 7 and recorded.block_range == (1, 5)  # not 9 and (3, 9)  # plain values keep the recorded ones


@dataclasses.dataclass
class Plan:
    common: CommonBatchMetadata
    rows: torch.Tensor
    runs: tuple  # tuples of (tensor, int)
    by_name: dict
    fresh: int  # a plain value: not compared
    _memo: dict = dataclasses.field(default_factory=dict)  # the backend's own: left alone

    @cached_property
    def derived(self) -> torch.Tensor:  # made on first use: keeps what the recorded step made
        return self.rows * 2


class Slotted:
    __slots__ = ("offsets", "_scratch")

    def __init__(self, offsets, scratch=None):
        self.offsets, self._scratch = offsets, scratch


def _plan(rows, runs, offsets, context_lens=(3, 6), fresh=0):
    common = _step(list(context_lens), [2, 3], [[1, 4, 6], [2, 5, 0]])
    return Plan(common, torch.tensor(rows), tuple((torch.tensor(r), n) for r, n in runs),
                {"offsets": Slotted(torch.tensor(offsets), torch.zeros(2))}, fresh)


def test_refill_walks_dataclasses_slots_tuples_and_dicts_and_leaves_private_and_derived_fields():
    recorded = _plan([0, 1], [([1, 2], 5)], [10, 20])
    recorded._memo["mask"] = torch.ones(3)
    derived = recorded.derived  # the recorded step's
    scratch = recorded.by_name["offsets"]._scratch
    new = _plan([4, 5], [([7, 8], 6)], [30, 40], context_lens=(8, 1), fresh=3)
    assert refill(recorded, new) == []
    assert recorded.rows.tolist() == [4, 5] and recorded.runs[0][0].tolist() == [7, 8]
    assert recorded.by_name["offsets"].offsets.tolist() == [30, 40]
    assert recorded.common.context_lens.tolist() == [8, 1]
    assert recorded.runs[0][1] == 5 and recorded.fresh == 0  # plain values: the recorded ones
    assert recorded._memo["mask"].tolist() == [1, 1, 1] and new._memo == {}
    assert recorded.derived is derived and derived.tolist() == [0, 2]  # stale, as a graph would keep it
    assert recorded.by_name["offsets"]._scratch is scratch


@pytest.mark.parametrize("edit, difference", [
    (lambda p: dataclasses.replace(p, rows=torch.tensor([1, 2, 3])), "meta.rows: shape [2] recorded, [3] now"),
    (lambda p: dataclasses.replace(p, rows=torch.tensor([1, 2], dtype=torch.int32)),
     "meta.rows: torch.int64 recorded, torch.int32 now"),
    (lambda p: dataclasses.replace(p, rows=None), "meta.rows: a tensor [2] recorded, None now"),
    (lambda p: dataclasses.replace(p, runs=p.runs * 2), "meta.runs: a tuple of 1 recorded, a tuple of 2 now"),
    (lambda p: dataclasses.replace(p, runs=list(p.runs)), "meta.runs: a tuple of 1 recorded, a list of 1 now"),
    (lambda p: dataclasses.replace(p, by_name={}), "meta.by_name: a dict with keys 'offsets' recorded, a dict "
                                                   "with keys none now"),
    (lambda p: dataclasses.replace(p, by_name={"offsets": Slotted(None)}),
     "meta.by_name['offsets'].offsets: a tensor [2] recorded, None now"),
])
def test_refill_says_why_a_replay_is_impossible(edit, difference):
    recorded = _plan([0, 1], [([1, 2], 5)], [10, 20])
    assert refill(recorded, edit(_plan([4, 5], [([7, 8], 6)], [30, 40]))) == [difference]
    assert recorded.rows.tolist() == [0, 1]  # nothing copied


def test_plain_values_of_another_form_are_no_difference():
    # a graph keeps the recorded plain values whatever their form: the kit checks forward never reads them
    assert refill({"range": (2, 5), "plan": ((0, 3), (3, 4))}, {"range": None, "plan": ((0, 3),)}) == []


def test_refill_writes_inference_tensors_from_outside_inference_mode():
    with torch.inference_mode():
        recorded, new = _step([3, 6], [2, 3], [[1, 0], [2, 5]]), _step([1, 2], [4, 5], [[3, 0], [6, 7]])
    assert refill(recorded, new) == [] and recorded.state_slots.tolist() == [4, 5]
