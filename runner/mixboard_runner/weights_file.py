"""Reading a ``.safetensors`` file tensor by tensor into the process's own memory.

safetensors' own loaders map the file and hand out views of the mapping:
every page a tensor touches stays resident for as long as any tensor of the
file lives. The runner re-lays most weights once they are loaded (fused
q/k/v, packed projections: ``models/linear.py``), so with the mapping the
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
from typing import Mapping

import torch

from .models.config import ModelError

DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
}
MAX_HEADER = 100_000_000  # the format's own limit on the JSON header


# Bytes read at a time into a tensor stored in another layout (see read_tensors).
RELAY_CHUNK_BYTES = 4 << 20


def read_tensors(path: Path, layouts: Mapping[str, object] = {}) -> dict[str, torch.Tensor]:
    """Every tensor of the file, each in memory of its own; ModelError if the file is not valid safetensors.

    A 2-D tensor named in ``layouts`` comes back stored in that layout (for a
    tied table: ``models.panels.PanelLayout`` or ``models.linear.ColumnMajor``),
    read a few rows at a time: the layout its products want, without holding
    the table twice. A layout has ``stored_shape(rows, cols)``,
    ``empty(rows, cols, dtype)``, ``write(stored, first_row, rows)`` and
    ``rows_multiple`` (each write but the last starts at a multiple of it)."""
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        head = fh.read(8)
        length = int.from_bytes(head, "little") if len(head) == 8 else -1
        if not 0 < length <= min(MAX_HEADER, size - 8):
            raise ModelError(f"{path} is not a safetensors file (its header length is missing or out of range)")
        try:
            header = json.loads(fh.read(length))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ModelError(f"{path} is not a safetensors file (its header is not JSON: {exc})") from None
        if not isinstance(header, dict):
            raise ModelError(f"{path} is not a safetensors file (its header is not a JSON object)")
        base = 8 + length
        tensors = {}
        for name, info in header.items():
            if name != "__metadata__":
                tensors[name] = _read_one(fh, path, name, info, base, size, layouts.get(name))
    return tensors


def _read_one(fh, path: Path, name: str, info, base: int, size: int, layout=None) -> torch.Tensor:
    try:
        dtype_name, shape, (start, end) = info["dtype"], list(info["shape"]), info["data_offsets"]
    except (KeyError, TypeError, ValueError):
        raise ModelError(f"{path}: the header entry of {name} is malformed") from None
    dtype = DTYPES.get(dtype_name)
    if dtype is None:
        raise ModelError(f"{path}: tensor {name} has dtype {dtype_name!r}, which mixboard does not read "
                         f"(supported: {', '.join(DTYPES)})")
    nbytes = math.prod(shape) * dtype.itemsize
    if end - start != nbytes or start < 0 or base + end > size:
        raise ModelError(f"{path}: tensor {name}'s bytes ({start}..{end}) do not match its shape {shape} "
                         f"and dtype {dtype_name}, or lie past the end of the file")
    if nbytes == 0:
        return torch.empty(shape, dtype=dtype)
    fh.seek(base + start)
    if layout is not None and len(shape) == 2:
        return _read_relaid(fh, path, name, shape, dtype, layout)
    buffer = bytearray(nbytes)
    if fh.readinto(buffer) != nbytes:
        raise ModelError(f"{path}: the file ends inside tensor {name}")
    return torch.frombuffer(buffer, dtype=dtype).view(shape)


def _read_relaid(fh, path: Path, name: str, shape: list[int], dtype: torch.dtype, layout) -> torch.Tensor:
    rows, cols = shape
    stored = layout.empty(rows, cols, dtype)
    multiple = layout.rows_multiple
    step = max(1, RELAY_CHUNK_BYTES // (cols * dtype.itemsize * multiple)) * multiple
    buffer = bytearray(min(rows, step) * cols * dtype.itemsize)
    for first in range(0, rows, step):
        n = min(step, rows - first)
        want = n * cols * dtype.itemsize
        if fh.readinto(memoryview(buffer)[:want]) != want:
            raise ModelError(f"{path}: the file ends inside tensor {name}")
        layout.write(stored, first, torch.frombuffer(buffer, dtype=dtype, count=n * cols).view(n, cols))
    return stored
