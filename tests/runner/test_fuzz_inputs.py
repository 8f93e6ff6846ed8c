"""Random bad models, with a fixed seed: each must end in one line on stderr and exit status 2, from
`mixboard run` (and, for configs, `explain` too) called in this process - never a traceback, never a
run that succeeds. Every mutation is drawn from a set that cannot give a valid model, so a zero
status is a real failure."""

from __future__ import annotations

import json
import math
import random
import shutil
import struct

import pytest
from safetensors.torch import load_file, save_file

from checkpoints import make_checkpoint
from inprocess import assert_one_line_error, mixboard_here

SEED = 1729
ARCHS = ("llama", "mamba", "mamba2", "lfm2", "bamba")
SHARDED = ("mamba2", "bamba")  # written as two shards with an index; the others as one file
RUN = ("--prompt-ids", "1,2", "--max-tokens", "2")

# Keys each builder reads as a size (for the checkpoints' configs), and every value none of them accepts.
SIZE_KEYS = {
    "llama": ["hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "num_hidden_layers",
              "intermediate_size", "vocab_size"],
    "mamba": ["hidden_size", "state_size", "num_hidden_layers", "vocab_size", "conv_kernel", "intermediate_size",
              "time_step_rank", "expand"],
    "mamba2": ["hidden_size", "num_heads", "head_dim", "state_size", "n_groups", "num_hidden_layers", "vocab_size",
               "conv_kernel", "chunk_size"],
    "lfm2": ["hidden_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers", "intermediate_size",
             "vocab_size", "conv_L_cache", "block_multiple_of"],
    "bamba": ["hidden_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers", "intermediate_size",
              "vocab_size", "mamba_n_heads", "mamba_d_head", "mamba_n_groups", "mamba_d_state", "mamba_d_conv",
              "mamba_chunk_size"],
}
BAD_SIZES = [0, -1, -64, 2 ** 24 + 1, 10 ** 12, "64", "x", [64], [], 64.5, 2.0, True, {"n": 64}]
# (path, kind): "positive" numbers must be finite and > 0, "eps" finite and >= 0
NUMBER_KEYS = {
    "llama": [(("rope_parameters", "rope_theta"), "positive"), (("rms_norm_eps",), "eps")],
    "mamba": [(("layer_norm_epsilon",), "eps")],
    "mamba2": [(("expand",), "positive"), (("layer_norm_epsilon",), "eps")],
    "lfm2": [(("rope_parameters", "rope_theta"), "positive"), (("norm_eps",), "eps"),
             (("block_ffn_dim_multiplier",), "positive")],
    "bamba": [(("rope_parameters", "rope_theta"), "positive"), (("rope_parameters", "partial_rotary_factor"), "positive"),
              (("mamba_expand",), "positive"), (("rms_norm_eps",), "eps")],
}
BAD_NUMBERS = {"positive": [0, 0.0, -1.0, "1.0", [1.0], True, math.inf, -math.inf, math.nan, {"v": 1}],
               "eps": [-1e-5, "1e-5", [1e-5], False, math.inf, math.nan, {"v": 1}]}
REQUIRED = {
    "llama": ["model_type", "hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size", "vocab_size"],
    "mamba": ["model_type", "hidden_size", "state_size", "num_hidden_layers", "vocab_size"],
    "mamba2": ["model_type", "hidden_size", "num_heads", "state_size", "num_hidden_layers", "vocab_size"],
    "lfm2": ["model_type", "hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size", "vocab_size"],
    "bamba": ["model_type", "hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size", "vocab_size",
              "mamba_n_heads", "mamba_d_state"],
}
BAD_EOS = ["2", ["2"], [[2]], True, -1, 2.5, [1, "2"], [1, None], {"id": 2}]
# other keys that have a shape of their own
BAD_OTHER = {
    "llama": [("model_type", ["gpt2", 1, ["llama"], {}]), ("rope_parameters", ["default", [1], 10000.0]),
              ("rope_scaling", ["linear", {"rope_type": "yarn", "factor": 2.0}, {"type": "linear"}]),
              ("sliding_window", [0, -4096, "4096", [4096]])],
    "mamba": [("model_type", ["mamba3", 2]), ("time_step_rank", ["8", [8], 0])],
    "mamba2": [("time_step_limit", ["12", 5, [1.0, 0.0], [-1.0, 1.0], [0.0, 1.0, 2.0], ["a", 1.0], [math.nan, 1.0]]),
               ("head_dim", [5, 7])],
    "lfm2": [("layer_types", [["conv"], "conv", [["conv"]], ["conv", "attention", "conv", "full_attention"]]),
             ("full_attn_idxs", [[[1]], ["1"], [-1], "1"])],  # read only without layer_types: see mutate_config
    "bamba": [("attn_layer_indices", [[[1]], ["1"], [-1], 1, "1"]), ("mamba_d_head", [5, 3]),
              ("time_step_limit", [[1.0, 0.0], "x"])],
}
# edits that break a divisibility rule: (edit, keys to drop)
BAD_RATIOS = {
    "llama": [({"num_key_value_heads": 3}, []), ({"num_attention_heads": 6}, ["head_dim"]),
              ({"num_attention_heads": 3}, [])],
    "mamba2": [({"n_groups": 3}, []), ({"num_heads": 3}, []), ({"num_heads": 16, "n_groups": 3, "head_dim": 8}, [])],
    "lfm2": [({"num_key_value_heads": 3}, []), ({"num_attention_heads": 6, "num_key_value_heads": 3}, [])],
    "bamba": [({"mamba_n_groups": 3}, []), ({"num_attention_heads": 3}, []), ({"mamba_n_heads": 3}, [])],
}

CONFIG_KINDS = ("size", "number", "eos", "drop", "null", "other", "ratio", "json")
WEIGHT_KINDS = ("truncate", "header_length", "header_byte", "int_dtype", "shape", "nonfinite", "duplicate",
                "index_escape", "drop_tensor", "extra_tensor")


def _cases() -> list[tuple]:
    rng = random.Random(SEED)
    cases = []
    for n in range(220):
        kind = CONFIG_KINDS[n % len(CONFIG_KINDS)]
        arch = rng.choice([a for a in ARCHS if kind != "ratio" or a in BAD_RATIOS])
        cases.append(("config", kind, arch, n))
    for n in range(220, 420):
        kind = WEIGHT_KINDS[n % len(WEIGHT_KINDS)]
        cases.append(("weights", kind, rng.choice(ARCHS), n))
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> dict:
    """A checkpoint of each architecture written by transformers; some resharded with an index."""
    out = {}
    for arch in ARCHS:
        directory = tmp_path_factory.mktemp(arch)
        make_checkpoint(arch, directory)
        if arch in SHARDED:
            state = load_file(str(directory / "model.safetensors"))
            (directory / "model.safetensors").unlink()
            names = sorted(state)
            weight_map = {}
            for i, part in enumerate((names[::2], names[1::2]), 1):
                file = f"model-0000{i}-of-00002.safetensors"
                save_file({n: state[n] for n in part}, str(directory / file), metadata={"format": "pt"})
                weight_map.update(dict.fromkeys(part, file))
            (directory / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
        out[arch] = directory
    return out


# -- configs ------------------------------------------------------------------------------------------------

def mutate_config(kind: str, arch: str, config: dict, rng: random.Random) -> tuple[bytes | None, str]:
    """The broken config.json text and a note of what was done."""
    if kind == "json":
        text = json.dumps(config).encode()
        how = rng.choice(["truncate", "nul", "ff", "nest", "not_object"])
        if how == "truncate":  # any strict prefix of an object's text is not JSON
            cut = rng.randrange(len(text))
            return text[:cut], f"truncated at {cut}"
        if how in ("nul", "ff"):  # neither byte may appear in JSON text
            at = rng.randrange(len(text) + 1)
            return text[:at] + (b"\0" if how == "nul" else b"\xff") + text[at:], f"{how} byte at {at}"
        if how == "nest":
            return b"[" * 50_000 + b"]" * 50_000, "nested 50000 deep"
        return json.dumps(rng.choice([[config], "llama", 7, None])).encode(), "not an object"
    config = json.loads(json.dumps(config))
    if kind == "size":
        key, value = rng.choice(SIZE_KEYS[arch]), rng.choice(BAD_SIZES)
        assert key in config, key
        config[key] = value
        note = f"{key}={value!r}"
    elif kind == "number":
        path, number_kind = rng.choice(NUMBER_KEYS[arch])
        value = rng.choice(BAD_NUMBERS[number_kind])
        parent = config
        for part in path[:-1]:
            parent = parent[part]
        assert path[-1] in parent, path
        parent[path[-1]] = value
        note = f"{'.'.join(path)}={value!r}"
    elif kind == "eos":
        config["eos_token_id"] = value = rng.choice(BAD_EOS)
        note = f"eos_token_id={value!r}"
    elif kind in ("drop", "null"):
        key = rng.choice(REQUIRED[arch])
        if kind == "drop":
            del config[key]
        else:
            config[key] = None
        note = f"{kind} {key}"
    elif kind == "other":
        key, values = rng.choice(BAD_OTHER[arch])
        config[key] = value = rng.choice(values)
        if key == "full_attn_idxs":
            config["layer_types"] = None
        note = f"{key}={value!r}"
    else:  # ratio
        edit, drop = rng.choice(BAD_RATIOS[arch])
        config.update(edit)
        for key in drop:
            del config[key]
        note = f"{edit} without {drop}"
    return json.dumps(config).encode(), note


# -- safetensors files --------------------------------------------------------------------------------------

def read_raw(path):
    raw = path.read_bytes()
    length = int.from_bytes(raw[:8], "little")
    return raw, length, json.loads(raw[8:8 + length])


def write_raw(path, header: dict, data: bytes) -> None:
    text = json.dumps(header).encode()
    path.write_bytes(len(text).to_bytes(8, "little") + text + data)


def tensor_names(header: dict) -> list[str]:
    return sorted(n for n in header if n != "__metadata__")


def mutate_weights(kind: str, directory, rng: random.Random) -> str:
    shards = sorted(directory.glob("*.safetensors"))
    path = rng.choice(shards)
    raw, length, header = read_raw(path)
    data = raw[8 + length:]
    name = rng.choice(tensor_names(header))
    info = header[name]
    if kind == "truncate":  # the last tensor ends at the end of the file: any cut loses bytes
        cut = rng.randrange(len(raw))
        path.write_bytes(raw[:cut])
        return f"{path.name} cut at {cut} of {len(raw)}"
    if kind == "header_length":  # another length moves the data's start: the tensors cannot tile it
        new = rng.choice([0, rng.randrange(1, length), rng.randrange(length + 1, len(raw) + 64), 2 ** 63 + 5])
        path.write_bytes(new.to_bytes(8, "little") + raw[8:])
        return f"{path.name} header length {length} -> {new}"
    if kind == "header_byte":  # neither byte may appear in UTF-8 JSON text
        at, byte = 8 + rng.randrange(length), rng.choice([0x00, 0xFF])
        path.write_bytes(raw[:at] + bytes([byte]) + raw[at + 1:])
        return f"{path.name} header byte {at} -> {byte:#x}"
    if kind == "int_dtype":  # every tensor of these checkpoints is a float weight
        info["dtype"] = rng.choice(["I32", "I32", "I8", "I16", "I64", "U8", "BOOL"])
        write_raw(path, header, data)
        return f"{name} dtype -> {info['dtype']}"
    if kind == "shape":
        shape = info["shape"]
        info["shape"] = rng.choice([[1] + shape, shape[:-1] + [shape[-1] + 1]])  # more dims, or another size
        write_raw(path, header, data)
        return f"{name} shape {shape} -> {info['shape']}"
    if kind == "nonfinite":
        value = rng.choice([math.nan, math.inf, -math.inf])
        start, end = info["data_offsets"]
        at = start + 4 * rng.randrange((end - start) // 4)
        write_raw(path, header, data[:at] + struct.pack("<f", value) + data[at + 4:])
        return f"{name} gets {value} at byte {at}"
    if kind == "duplicate":
        tensor = load_file(str(path))[name]
        other = [s for s in shards if s != path]
        if other:  # into the other shard of an indexed checkpoint
            state = load_file(str(other[0]))
            state[name] = tensor
            save_file(state, str(other[0]))
            return f"{name} also in {other[0].name}"
        save_file({name: tensor}, str(directory / rng.choice(["extra.safetensors", "model-2.safetensors"])))
        return f"{name} also in a second file"
    if kind == "index_escape":
        index = directory / "model.safetensors.index.json"
        weight_map = json.loads(index.read_text())["weight_map"] if index.exists() else dict.fromkeys(
            tensor_names(header), path.name)
        outside = directory.parent / "outside"
        outside.mkdir()
        shutil.copy(path, outside / path.name)
        shutil.copy(path, directory.parent / path.name)
        (directory / "linked").symlink_to(outside, target_is_directory=True)
        escape = rng.choice([f"../{path.name}", str(outside / path.name), f"linked/{path.name}",
                             f"./../{path.name}", f"linked/../../{path.name}"])
        weight_map = {n: (escape if f == path.name else f) for n, f in weight_map.items()}
        index.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
        return f"index names {escape}"
    if kind == "drop_tensor":
        del header[name]
        start, end = info["data_offsets"]
        for other in header.values():  # the bytes go too, so the rest still tiles the data
            if isinstance(other, dict) and "data_offsets" in other and other["data_offsets"][0] >= end:
                other["data_offsets"] = [o - (end - start) for o in other["data_offsets"]]
        write_raw(path, header, data[:start] + data[end:])
        return f"{name} dropped"
    state = load_file(str(path))  # extra_tensor: one no model of these has
    state[f"{name.rsplit('.', 1)[0]}.extra_weight"] = state[name].clone()
    save_file(state, str(path))
    return f"{name}'s module gets an extra tensor"


@pytest.mark.parametrize("case", CASES, ids=[f"{t}-{k}-{a}-{n}" for t, k, a, n in CASES])
def test_bad_model_gets_one_line(case, clean, tmp_path, capsys):
    target, kind, arch, n = case
    rng = random.Random(f"{SEED}/{n}")
    directory = tmp_path / "model"
    shutil.copytree(clean[arch], directory)
    command = "run"
    if target == "config":
        config = json.loads((directory / "config.json").read_text())
        text, note = mutate_config(kind, arch, config, rng)
        (directory / "config.json").write_bytes(text)
        command = "explain" if n % 3 == 0 else "run"
    else:
        note = mutate_weights(kind, directory, rng)
    status, err = mixboard_here(capsys, command, directory, *(RUN if command == "run" else ()))
    assert_one_line_error(status, err, context=(command, arch, note))
