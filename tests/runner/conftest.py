"""Fixtures the runner's tests share."""

from __future__ import annotations

import pytest

from checkpoints import make_checkpoint


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    """A small random llama checkpoint, written once per test module."""
    directory = tmp_path_factory.mktemp("llama")
    make_checkpoint("llama", directory)
    return directory
