"""Loading a model: a Hugging Face style directory (``config.json`` and
``*.safetensors``, optionally sharded with ``model.safetensors.index.json``),
or the built-in ``demo``. Pickle checkpoints are refused: loading one runs
arbitrary code."""

from __future__ import annotations

import json
import logging
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

import torch
from torch.nn import init

from mixboard.dtypes import dtype_name, torch_dtype

from .models import ARCHITECTURES, demo
from .models.config import ConfigReader, ModelError, show
from .models.model import CausalLM, checkpoint_names
from .weights_file import iter_tensors

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
DEMO = "demo"
INDEX = "model.safetensors.index.json"


def read_config(path: str | Path) -> dict:
    directory = Path(path)
    if not directory.is_dir():
        raise ModelError(f"model {str(path)!r} is not a directory (give a Hugging Face style folder, or 'demo')")
    config_path = directory / "config.json"
    try:
        text = config_path.read_bytes()
    except FileNotFoundError:
        raise ModelError(f"{directory} has no config.json") from None
    except OSError as exc:  # a directory, no permission, an I/O error
        raise ModelError(f"cannot read {config_path}: {exc.strerror or exc}") from None
    try:
        config = json.loads(text)
    except (ValueError, RecursionError) as exc:  # bad JSON or UTF-8 (both ValueErrors), or absurd nesting
        raise ModelError(f"{config_path} is not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise ModelError(f"{config_path} must hold a JSON object")
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in ARCHITECTURES:
        raise ModelError(f"{config_path}: model_type {show(model_type)} is not supported; supported: "
                         f"{', '.join(sorted(ARCHITECTURES))}")
    return config


def build_model(model: str | Path | None, dtype: str = "float32", device: str = "meta") -> CausalLM:
    """The model's modules without weights (device 'meta'): enough to plan."""
    if model in (None, DEMO):
        return demo.build(dtype).to(torch_dtype(dtype))
    config = read_config(model)
    with torch.device(device), _without_init(device):
        built = ARCHITECTURES[config["model_type"]](ConfigReader(config, config["model_type"]), dtype)
    built.info.config = config
    return built


@contextmanager
def _without_init(device: str):
    """Skip torch's random initialisation of parameters that the checkpoint
    overwrites. On the meta device it would also import torch._dynamo
    (~2 s and ~75 MB of a process that never compiles anything)."""
    if device != "meta":
        yield
        return
    names = ("normal_", "uniform_", "kaiming_uniform_", "trunc_normal_", "xavier_uniform_", "zeros_", "ones_")
    saved = {name: getattr(init, name) for name in names}
    for name in names:
        setattr(init, name, lambda tensor, *args, **kwargs: tensor)
    try:
        yield
    finally:
        for name, function in saved.items():
            setattr(init, name, function)


def load_model(model: str | Path | None, dtype: str = "float32", device: str = "cpu", *,
               allow_nonfinite: bool = False) -> CausalLM:
    """A model ready to run: weights loaded, checked and converted. Weights holding NaN or Inf
    are refused unless ``allow_nonfinite`` (then a warning is logged)."""
    built = build_model(model, dtype)
    if model not in (None, DEMO):
        state = load_weights(Path(model), allow_nonfinite=allow_nonfinite)
        _assign(built, state, torch_dtype(dtype), allow_nonfinite)
        del state  # the model holds the tensors now: binding its ops can free each one an impl re-lays
    built = built.to(device)
    built.finalize()
    return built.eval()


def weight_files(directory: Path) -> list[Path]:
    index = directory / INDEX
    if index.is_file():
        files = sorted({_shard(directory, index, name) for name in _weight_map(index).values()})
        missing = [show(str(f.relative_to(directory))) for f in files if not f.is_file()]
        if missing:
            raise ModelError(f"{index} names shards that are missing: {', '.join(missing)}")
        return files
    files = sorted(directory.glob("*.safetensors"))
    if files:
        return files
    pickles = sorted(p.name for p in directory.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if pickles:
        raise ModelError(
            f"{directory} holds only pickle checkpoints ({', '.join(pickles)}), which mixboard refuses: loading a "
            "pickle runs arbitrary code. Convert once where you trust the file: "
            "transformers' AutoModelForCausalLM.from_pretrained(dir).save_pretrained(dir, safe_serialization=True)")
    raise ModelError(f"{directory} has no *.safetensors weights")


def _weight_map(index: Path) -> dict:
    try:
        weight_map = json.loads(index.read_bytes())["weight_map"]
    except OSError as exc:
        raise ModelError(f"cannot read {index}: {exc.strerror or exc}") from None
    except (ValueError, RecursionError, KeyError, TypeError) as exc:
        raise ModelError(f"{index} is malformed ({show(exc)}); it needs a 'weight_map' object") from None
    if not isinstance(weight_map, dict) or not all(isinstance(f, str) for f in weight_map.values()):
        raise ModelError(f"{index}: 'weight_map' must map tensor names to shard file names, not {show(weight_map)}")
    return weight_map


def _shard(directory: Path, index: Path, name: str) -> Path:
    """The shard ``name`` (from the index) inside the model folder. A name that leads out of it
    (absolute, '..', or through a linked folder) is refused: the index alone would make the loader
    read any file. The shard itself may be a link, as every file of a Hugging Face cache snapshot is."""
    relative = PurePosixPath(name)
    path = directory / relative
    inside = (name and not relative.is_absolute() and ".." not in relative.parts
              and path.parent.resolve().is_relative_to(directory.resolve()))
    if not inside:
        raise ModelError(f"{index} names a shard outside the model folder: {show(name, 300)} (shards must be files "
                         f"in the folder)")
    return path


def load_weights(directory: Path, *, allow_nonfinite: bool = False) -> dict[str, torch.Tensor]:
    """Every tensor of the checkpoint, each checked as it is read: a name in two shards is refused, and so
    are NaN and Inf values unless ``allow_nonfinite``."""
    state: dict[str, torch.Tensor] = {}
    shard_of: dict[str, Path] = {}
    nonfinite: dict[str, int] = {}
    for path in weight_files(directory):
        try:
            for name, tensor in iter_tensors(path):
                if name in shard_of:
                    raise ModelError(f"tensor {name} is in two shards, {shard_of[name]} and {path}: mixboard will "
                                     "not guess which one is meant")
                shard_of[name] = path
                count = count_nonfinite(tensor)
                if count:
                    nonfinite[name] = count
                state[name] = tensor
        except OSError as exc:
            raise ModelError(f"cannot read {path}: {exc.strerror or exc}") from None
    if nonfinite:
        _nonfinite_found(nonfinite, allow_nonfinite)
    return state


def count_nonfinite(tensor: torch.Tensor) -> int:
    """How many values of a float tensor are NaN or infinite. A finite tensor costs one sum: a NaN or
    an infinity anywhere makes the sum NaN or infinite (a sum that overflows only costs the exact count)."""
    if not tensor.is_floating_point() or tensor.numel() == 0:
        return 0
    if tensor.element_size() == 1:  # float8: torch sums and tests it only by way of float32
        tensor = tensor.float()
    if torch.isfinite(tensor.sum()):
        return 0
    return tensor.numel() - int(torch.isfinite(tensor).sum())


def _nonfinite_found(counts: dict[str, int], allowed: bool) -> None:
    first = ", ".join(f"{name} ({n})" for name, n in list(counts.items())[:3])
    more = f" and {len(counts) - 3} more" if len(counts) > 3 else ""
    found = (f"{len(counts)} tensor(s) of the checkpoint hold NaN or infinite values, {sum(counts.values())} "
             f"in all: {first}{more}")
    if not allowed:
        raise ModelError(f"{found}; the model would compute garbage (load it anyway with --allow-nonfinite-weights, "
                         "or Engine(..., allow_nonfinite_weights=True))")
    logging.getLogger("mixboard_runner").warning("warning: %s; loading them anyway, as asked", found)


def _assign(model: CausalLM, state: dict[str, torch.Tensor], dtype: torch.dtype, allow_nonfinite: bool = False) -> None:
    """Check the checkpoint's tensors against the model's and hand them over (by the checkpoint's names)."""
    names = checkpoint_names(model)  # the model's key -> the checkpoint's
    params = model.state_dict(keep_vars=True)
    expected = {names[key]: param for key, param in params.items()}
    missing = [n for n in expected if n not in state]
    if missing:
        raise ModelError(f"checkpoint is missing {len(missing)} tensor(s), first: {', '.join(missing[:3])}")
    # a tied model's LM head is its table: a checkpoint that stores it anyway is read without it
    ignored = ("lm_head.weight",) if model.tie_embeddings else ()
    unexpected = [n for n in state if n not in expected and n not in ignored and not n.endswith("rotary_emb.inv_freq")
                  and not n.startswith(model.unused_prefixes)]
    if unexpected:
        raise ModelError(f"checkpoint has {len(unexpected)} tensor(s) this {model.info.model_type} model does not "
                         f"use, first: {', '.join(unexpected[:3])} (is config.json the checkpoint's?)")
    for name, param in expected.items():
        tensor = state[name]
        if not tensor.is_floating_point():  # a quantized or foreign checkpoint: converted, it would run as garbage
            raise ModelError(f"tensor {name} has dtype {dtype_name(tensor.dtype)}, where a float "
                             "weight belongs (mixboard does not convert integer or bool tensors)")
        if tuple(tensor.shape) != tuple(param.shape):
            raise ModelError(f"tensor {name} has shape {list(tensor.shape)}, the config implies {list(param.shape)}")
    converted = {key: _converted(names[key], state.pop(names[key]), dtype, allow_nonfinite) for key in params}
    model.load_state_dict(converted, strict=True, assign=True)


def _converted(name: str, tensor: torch.Tensor, dtype: torch.dtype, allow_nonfinite: bool) -> torch.Tensor:
    """The tensor in the model's dtype; a value beyond that dtype's range would become infinite there."""
    out = tensor.to(dtype)
    narrower = out is not tensor and torch.finfo(tensor.dtype).max > torch.finfo(dtype).max
    count = count_nonfinite(out) if narrower and not allow_nonfinite else 0
    if count:
        raise ModelError(f"tensor {name} has {count} value(s) beyond {dtype_name(dtype)}'s range "
                         f"(largest {torch.finfo(dtype).max:g}): run it in a wider dtype")
    return out
