"""The runner's safetensors reader against safetensors' own loader, and its
errors on files that are not valid safetensors."""

from __future__ import annotations

import json
import re
import struct

import pytest
import torch
from safetensors.torch import load_file, save_file

from mixboard_runner.models.config import ModelError
from mixboard_runner.weights_file import read_tensors


def test_reads_what_safetensors_reads(tmp_path):
    torch.manual_seed(0)
    tensors = {
        "f32": torch.randn(3, 5), "bf16": torch.randn(4, 2).bfloat16(), "f16": torch.randn(7).half(),
        "i64": torch.arange(6).view(2, 3), "bool": torch.tensor([True, False, True]), "empty": torch.empty(0, 4),
        "scalar": torch.tensor(2.5),
    }
    path = tmp_path / "w.safetensors"
    save_file(tensors, str(path), metadata={"format": "pt"})
    got, reference = read_tensors(path), load_file(str(path))
    assert set(got) == set(reference)
    for name, tensor in reference.items():
        assert got[name].dtype == tensor.dtype and got[name].shape == tensor.shape
        assert torch.equal(got[name], tensor), name
    # each tensor owns its memory: writing one leaves the others alone
    got["f32"].zero_()
    assert torch.equal(got["i64"], reference["i64"])


def _raw(header: dict, data: bytes) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


@pytest.mark.parametrize("content, message", [
    (b"", "header length is missing or out of range"),
    (struct.pack("<Q", 10 ** 9) + b"{}", "header length is missing or out of range"),
    (struct.pack("<Q", 4) + b"{no}", "its header is not JSON"),
    (_raw({"w": {"dtype": "F4", "shape": [2], "data_offsets": [0, 1]}}, b"\0"), "dtype 'F4', which mixboard does not read"),
    (_raw({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8), "lie past the end of the file"),
    (_raw({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 12]}}, b"\0" * 12), "do not match its shape [4]"),
    (_raw({"w": {"shape": [4]}}, b""), "the header entry of w is malformed"),
    # the format's own rules, which safetensors enforces too: the tensors tile the data exactly
    (_raw({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8), "a gap before tensor a"),
    (_raw({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
           "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8),
     "bytes that overlap another tensor's in tensor b"),
    (_raw({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 6), "2 bytes follow its last tensor"),
    (_raw({"w": {"dtype": "F32", "shape": [-1, -4], "data_offsets": [0, 16]}}, b"\0" * 16),
     "the header entry of w is malformed (shape and data_offsets must be integers >= 0)"),
    (_raw({"w": {"dtype": "F32", "shape": "4", "data_offsets": [0, 16]}}, b"\0" * 16), "the header entry of w is malformed"),
    (_raw({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0.0, 16]}}, b"\0" * 16), "the header entry of w is malformed"),
    (_raw({"w": {"dtype": "F32", "shape": [True], "data_offsets": [0, 4]}}, b"\0" * 4), "the header entry of w is malformed"),
    (_raw({"w": {"dtype": ["F32"], "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4), "dtype ['F32'], which mixboard"),
    (_raw({"a\nb": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4), "the tensor name 'a\\nb' is not"),
    (struct.pack("<Q", 4) + b"{\"\xff\"" + b"\0" * 4, "its header is not JSON"),
])
def test_invalid_files_raise_model_error(tmp_path, content, message):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(content)
    with pytest.raises(ModelError, match=re.escape(message)):
        read_tensors(path)
