from __future__ import annotations

import itertools
import sys

import pytest

from compiled_kernels import missing_kernels_line, required
from distfactory import entry_points_from, forget_modules, write_distribution

_counter = itertools.count()


def pytest_sessionstart(session):
    """Under MIXBOARD_REQUIRE_KERNELS=1 (CI) a kernel that did not build fails the run instead of skipping its tests."""
    if required() and (line := missing_kernels_line()):
        pytest.exit(line, returncode=1)


@pytest.fixture
def distributions(tmp_path, monkeypatch):
    """Make real distributions on a fresh sys.path entry; ``.load()`` loads
    exactly their plugins through mixboard's entry-point loader."""
    for var in ("MIXBOARD_PLUGINS", "MIXBOARD_DISABLE_PLUGINS", "MIXBOARD_STRICT_PLUGINS", "MIXBOARD_BACKEND",
                "MIXBOARD_BACKEND_OPTIONS"):
        monkeypatch.delenv(var, raising=False)
    root = tmp_path / f"site{next(_counter)}"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    made_modules: list[str] = []

    class Factory:
        path = root

        def add(self, name, version="1.0", entry_points=None, files=None):
            made_modules.extend(rel.split("/")[0].removesuffix(".py") for rel in (files or {}))
            return write_distribution(root, name, version, entry_points, files)

        def entry_points(self):
            return entry_points_from(root)

        def load(self):
            from mixboard.plugins import load

            forget_modules(*made_modules)
            return load(self.entry_points())

        def registry(self):
            from mixboard import Registry

            return Registry(self.load())

    yield Factory()
    forget_modules(*made_modules)
    sys.path_importer_cache.clear()
