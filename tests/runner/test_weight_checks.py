"""Weights are checked as they load: NaN and Inf (refused unless asked for), integer tensors where
float weights belong, a tensor in two shards, shards outside the model folder. Each refusal is one
line naming the tensor or the file."""

from __future__ import annotations

import json
import logging
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from checkpoints import make_checkpoint
from inprocess import assert_one_line_error, mixboard_here
from mixboard.dtypes import dtype_name
from mixboard_runner.engine import Engine
from mixboard_runner.loader import count_nonfinite, load_model
from mixboard_runner.models.config import ModelError
from mixboard_runner.sampling import SamplingParams

RUN = ("--prompt-ids", "1,2", "--max-tokens", "2")
Q = "model.layers.0.self_attn.q_proj.weight"
UP = "model.layers.1.mlp.up_proj.weight"


def copy_with(source, target, edit=None):
    """A copy of the checkpoint at ``target``, its tensors passed through ``edit(state)`` first."""
    shutil.copytree(source, target)
    if edit is not None:
        state = load_file(str(target / "model.safetensors"))
        edit(state)
        save_file(state, str(target / "model.safetensors"), metadata={"format": "pt"})
    return target


def poison(state):
    state[Q][3, 5] = float("nan")
    state[Q][0, :2] = float("inf")
    state[UP][7, 7] = -float("inf")


def test_nonfinite_weights_are_refused_by_name_and_count(llama_dir, tmp_path, capsys):
    directory = copy_with(llama_dir, tmp_path / "m", poison)
    status, err = mixboard_here(capsys, "run", directory, *RUN)
    assert_one_line_error(status, err, f"2 tensor(s) of the checkpoint hold NaN or infinite values, 4 in all: "
                                       f"{Q} (3), {UP} (1); the model would compute garbage "
                                       "(load it anyway with --allow-nonfinite-weights")


def test_nonfinite_weights_load_and_run_when_allowed(llama_dir, tmp_path, capsys, caplog):
    directory = copy_with(llama_dir, tmp_path / "m", poison)
    with pytest.raises(ModelError, match="hold NaN or infinite values"):
        load_model(directory)
    status, _ = mixboard_here(capsys, "run", directory, *RUN, "--allow-nonfinite-weights", "--json")
    assert status == 0
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="mixboard_runner"):
        engine = Engine(directory, allow_nonfinite_weights=True)
    (record,) = caplog.records
    assert "\n" not in record.getMessage()
    assert record.getMessage().startswith("warning: 2 tensor(s) of the checkpoint hold NaN or infinite values, 4 in "
                                          f"all: {Q} (3), {UP} (1); loading them anyway")
    (output,) = engine.generate([[1, 2, 3]], SamplingParams(max_tokens=3, ignore_eos=True))
    assert len(output.output_ids) == 3


@pytest.mark.parametrize("dtype", [torch.int32, torch.int8, torch.bool])
def test_integer_weights_are_refused(llama_dir, tmp_path, capsys, dtype):
    def to_int(state):
        state[UP] = (state[UP] * 10).to(dtype)

    directory = copy_with(llama_dir, tmp_path / "m", to_int)
    status, err = mixboard_here(capsys, "run", directory, *RUN)
    name = dtype_name(dtype)
    assert_one_line_error(status, err, f"tensor {UP} has dtype {name}, where a float weight belongs")


def test_a_tied_integer_table_is_refused_too(tmp_path, capsys):
    # lfm2 ties its table, which the loader reads straight into the products' layout
    make_checkpoint("lfm2", tmp_path)
    state = load_file(str(tmp_path / "model.safetensors"))
    state["model.embed_tokens.weight"] = state["model.embed_tokens.weight"].to(torch.int32)
    save_file(state, str(tmp_path / "model.safetensors"))
    status, err = mixboard_here(capsys, "run", tmp_path, *RUN)
    assert_one_line_error(status, err, "tensor model.embed_tokens.weight has dtype int32, where a float weight belongs")


def test_bf16_tied_table_runs_in_float32(tmp_path):
    """The table read straight into its layout is stored in the model's dtype, not the file's."""
    bf16, rounded = tmp_path / "bf16", tmp_path / "rounded"
    make_checkpoint("lfm2", bf16)
    state = load_file(str(bf16 / "model.safetensors"))
    save_file({n: t.bfloat16() for n, t in state.items()}, str(bf16 / "model.safetensors"))
    shutil.copytree(bf16, rounded)
    save_file({n: t.bfloat16().float() for n, t in state.items()}, str(rounded / "model.safetensors"))
    ids = [5, 6, 7, 8, 9]
    got, want = Engine(bf16).score(ids, 2), Engine(rounded).score(ids, 2)
    assert torch.isfinite(got).all() and torch.equal(got, want)


def test_values_beyond_the_model_dtype_are_refused(llama_dir, tmp_path):
    def huge(state):
        state[UP][1, 2] = 1e6  # finite in float32, infinite in float16

    directory = copy_with(llama_dir, tmp_path / "m", huge)
    with pytest.raises(ModelError, match=f"tensor {UP} has 1 value\\(s\\) beyond float16's range"):
        load_model(directory, dtype="float16")
    load_model(directory, dtype="bfloat16")  # bfloat16 has float32's range


def reshard(directory, index=True):
    """Split model.safetensors into two shards (with an index, or without)."""
    state = load_file(str(directory / "model.safetensors"))
    (directory / "model.safetensors").unlink()
    names = sorted(state)
    halves = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for file, part in halves.items():
        save_file({n: state[n] for n in part}, str(directory / file), metadata={"format": "pt"})
    if index:
        weight_map = {n: file for file, part in halves.items() for n in part}
        (directory / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return halves


@pytest.mark.parametrize("index", [True, False])
def test_a_tensor_in_two_shards_is_refused_naming_both(llama_dir, tmp_path, capsys, index):
    directory = copy_with(llama_dir, tmp_path / "m")
    halves = reshard(directory, index)
    first, second = (directory / file for file in halves)
    extra = halves[first.name][0]
    state = load_file(str(second))
    state[extra] = load_file(str(first))[extra]
    save_file(state, str(second))
    status, err = mixboard_here(capsys, "run", directory, *RUN)
    assert_one_line_error(status, err, f"tensor {extra} is in two shards, {first} and {second}")


def test_sharded_checkpoint_still_loads(llama_dir, tmp_path):
    whole = load_model(llama_dir)
    directory = copy_with(llama_dir, tmp_path / "m")
    reshard(directory)
    sharded = load_model(directory)
    assert all(torch.equal(a, b) for a, b in zip(whole.state_dict().values(), sharded.state_dict().values()))


@pytest.mark.parametrize("where", ["parent", "absolute", "dotdot_inside", "linked_folder"])
def test_shards_outside_the_model_folder_are_refused(llama_dir, tmp_path, capsys, where):
    directory = copy_with(llama_dir, tmp_path / "m")
    halves = reshard(directory)
    file = next(iter(halves))
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.copy(directory / file, outside / file)
    shutil.copy(directory / file, tmp_path / file)
    name = {"parent": f"../{file}", "absolute": str(outside / file), "dotdot_inside": f"sub/../{file}",
            "linked_folder": f"linked/{file}"}[where]
    (directory / "sub").mkdir()
    (directory / "linked").symlink_to(outside, target_is_directory=True)
    index = directory / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    data["weight_map"] = {n: (name if f == file else f) for n, f in data["weight_map"].items()}
    index.write_text(json.dumps(data))
    status, err = mixboard_here(capsys, "run", directory, *RUN)
    assert_one_line_error(status, err, f"names a shard outside the model folder: {name!r}")


def test_a_linked_shard_file_loads_as_in_a_hub_cache_snapshot(llama_dir, tmp_path):
    """The Hugging Face cache keeps each file of a snapshot as a link into the repo's blobs folder."""
    blobs, snapshot = tmp_path / "blobs", tmp_path / "snapshots" / "abc"
    directory = copy_with(llama_dir, tmp_path / "m")
    halves = reshard(directory)
    blobs.mkdir()
    snapshot.mkdir(parents=True)
    for path in directory.iterdir():
        shutil.move(path, blobs / path.name)
        (snapshot / path.name).symlink_to(blobs / path.name)
    assert load_model(snapshot).info.model_type == "llama" and len(halves) == 2


@pytest.mark.parametrize("weight_map, message", [
    ([], "'weight_map' must map tensor names to shard file names, not []"),
    ({Q: 3}, "'weight_map' must map tensor names to shard file names"),
    ({Q: ""}, "names a shard outside the model folder: ''"),
    (None, "'weight_map' must map tensor names to shard file names, not None"),
])
def test_malformed_index_is_one_line(llama_dir, tmp_path, capsys, weight_map, message):
    directory = copy_with(llama_dir, tmp_path / "m")
    (directory / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    status, err = mixboard_here(capsys, "run", directory, *RUN)
    assert_one_line_error(status, err, message)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_count_nonfinite(dtype):
    t = torch.randn(1000, 33).to(dtype)
    assert count_nonfinite(t) == 0 and count_nonfinite(t.t()) == 0
    t[3, 4], t[999, 0], t[5, 32] = float("nan"), float("inf"), -float("inf")
    assert count_nonfinite(t) == 3 and count_nonfinite(t.t()) == 3
    assert count_nonfinite(torch.arange(5)) == 0 and count_nonfinite(torch.empty(0, dtype=dtype)) == 0
    # finite values whose sum overflows: the exact count decides
    assert count_nonfinite(torch.full((10,), torch.finfo(dtype).max, dtype=dtype)) == 0


def test_count_nonfinite_float8():
    t = torch.randn(64).to(torch.float8_e5m2)
    assert count_nonfinite(t) == 0
    t[7] = float("inf")
    assert count_nonfinite(t) == 1
