import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
from harness import run  # noqa: E402
from models import WRITERS  # noqa: E402

OFF = {"MIXBOARD_VLLM": "0"}


@pytest.fixture(scope="session")
def workdir(tmp_path_factory):
    yield str(tmp_path_factory.mktemp("vllm"))
    harness.close_hosts()


@pytest.fixture(scope="session")
def checkpoint(workdir):
    made = {}

    def get(name: str) -> str:
        if name not in made:
            made[name] = os.path.join(workdir, name)
            WRITERS[name](made[name])
        return made[name]

    return get


@pytest.fixture(scope="session")
def native(workdir, checkpoint):
    """vLLM's own greedy ids for a model (the integration off), once per session and configuration:
    ``native(name)`` in eager mode, ``native(name, {"enforce_eager": False})`` compiled, ..."""
    done = {}

    def get(name: str, extra: dict | None = None, env: dict | None = None) -> list:
        key = (name, json.dumps(extra or {}, sort_keys=True), json.dumps(env or {}, sort_keys=True))
        if key not in done:
            tag = f"{name}_native" + "".join(f"_{k}={v}" for k, v in sorted((extra or {}).items()))
            r = run(workdir, tag, checkpoint(name), {**OFF, **(env or {})}, extra)
            assert r.rc == 0, r.log[-3000:]
            assert "mixboard-vllm plan" not in r.log
            done[key] = r
        return done[key].ids

    get.runs = done
    return get
