"""Reading a ``.safetensors`` file tensor by tensor into the process's own memory.

safetensors' own loaders map the file and hand out views of the mapping:
every page a tensor touches stays resident for as long as any tensor of the
file lives. Backends re-lay many weights once they are loaded (fused
q/k/v, packed projections: each impl's ``load``), so with the mapping the
peak would hold the file and its re-laid copy at once. Reading each tensor
with plain reads instead lets each original go as soon as its copy exists.

The format (https://huggingface.co/docs/safetensors): an 8-byte little-endian
header length, a JSON header mapping names to dtype, shape and byte offsets
into the data that follows; an optional ``__metadata__`` entry.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Iterator

import torch

from .models.config import ModelError, show

DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
}
MAX_HEADER = 100_000_000  # the format's own limit on the JSON header


def read_tensors(path: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the file, each in memory of its own; ModelError if the file is not valid safetensors."""
    return dict(iter_tensors(path))


def iter_tensors(path: Path) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) for each tensor of the file in the order of its bytes, each read when it is asked
    for (a caller can check one while it is still in cache). The whole header is checked first."""
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        head = fh.read(8)
        length = int.from_bytes(head, "little") if len(head) == 8 else -1
        if not 0 < length <= min(MAX_HEADER, size - 8):
            raise ModelError(f"{path} is not a safetensors file (its header length is missing or out of range)")
        try:
            header = json.loads(fh.read(length).decode("utf-8"))
        except (ValueError, RecursionError) as exc:  # not UTF-8, not JSON, or absurdly nested
            raise ModelError(f"{path} is not a safetensors file (its header is not JSON: {exc})") from None
        if not isinstance(header, dict):
            raise ModelError(f"{path} is not a safetensors file (its header is not a JSON object)")
        base = 8 + length
        entries = _entries(path, header, size - base)
        for name, dtype, shape, start, nbytes in entries:
            yield name, _read_one(fh, path, name, dtype, shape, base + start, nbytes)


def _entries(path: Path, header: dict, data_size: int) -> list[tuple]:
    """(name, dtype, shape, start, nbytes) of every tensor, by offset. As the format requires, the
    tensors' bytes tile the data exactly: no gap, no overlap, nothing after the last."""
    entries = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if not name.isprintable():  # every message that names it stays one line
            raise ModelError(f"{path}: the tensor name {show(name)} is not printable")
        try:
            dtype_name, shape, (start, end) = info["dtype"], info["shape"], info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise ModelError(f"{path}: the header entry of {name} is malformed") from None
        if not (isinstance(shape, list) and all(_count(n) for n in shape) and _count(start) and _count(end)):
            raise ModelError(f"{path}: the header entry of {name} is malformed (shape and data_offsets must be "
                             f"integers >= 0)")
        dtype = DTYPES.get(dtype_name) if isinstance(dtype_name, str) else None
        if dtype is None:
            raise ModelError(f"{path}: tensor {name} has dtype {show(dtype_name)}, which mixboard does not read "
                             f"(supported: {', '.join(DTYPES)})")
        nbytes = math.prod(shape) * dtype.itemsize
        if end - start != nbytes or end > data_size:
            raise ModelError(f"{path}: tensor {name}'s bytes ({start}..{end}) do not match its shape {shape} "
                             f"and dtype {dtype_name}, or lie past the end of the file")
        entries.append((name, dtype, shape, start, nbytes))
    entries.sort(key=lambda e: (e[3], e[4]))
    covered = 0
    for name, _, _, start, nbytes in entries:
        if start != covered:
            what = "a gap before" if start > covered else "bytes that overlap another tensor's in"
            raise ModelError(f"{path} is not a valid safetensors file: there are {what} tensor {name} "
                             f"(at byte {start} of the data)")
        covered = start + nbytes
    if covered != data_size:
        raise ModelError(f"{path} is not a valid safetensors file: {data_size - covered} bytes follow its last tensor")
    return entries


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _read_one(fh, path: Path, name: str, dtype: torch.dtype, shape: list[int], offset: int,
              nbytes: int) -> torch.Tensor:
    if nbytes == 0:
        return torch.empty(shape, dtype=dtype)
    fh.seek(offset)
    buffer = bytearray(nbytes)
    if fh.readinto(buffer) != nbytes:
        raise ModelError(f"{path}: the file ends inside tensor {name}")
    return torch.frombuffer(buffer, dtype=dtype).view(shape)
