"""Run vLLM engines for the lane's tests and read what each did: ids, log, plan, steps.

How the lane shares work (a new test file adopts it by using these fixtures and ``run``):

- ``run(workdir, tag, path, env, extra)`` starts one engine with the integration's environment
  ``env`` and LLM() arguments ``extra`` over run_llm's defaults, generates run_llm.PROMPTS in one
  call, and returns a Run (rc, log, ids, plan table, fingerprints, steps). One engine is one
  configuration (model, mode, ranks, options, rules): a plan is fixed at start-up, so a new
  configuration needs a new engine, and one Run answers every assertion about its configuration.
- The engines are started by long-lived engine_host.py processes, one per value of HOST_KEYS
  (mixboard on or off): vLLM is imported and the LLM() process set up once per session and side,
  not once per engine. Each engine still has its own engine core and worker processes, as in any
  use of vLLM, with the environment of its run; an engine that fails to start ends its host.
- Reuse a configuration's Run within a module through a module-scoped fixture that caches it by
  its key (test_compiled.py's ``compiled``, test_hybrids_2026.py's ``ours``, test_jamba.py's ``jamba``).
- vLLM alone's reference: the session fixture ``native(name)`` (eager) or ``native(name,
  {"enforce_eager": False})`` (compiled) from conftest.py runs vLLM alone once per session, model and
  mode (never across sessions: it is recomputed in every run), and every configuration of that model
  in that mode, on one rank or two, is compared with its ids. ``checkpoint(name)`` writes a
  models.py checkpoint once per session.
- Every run of a session shares one compile cache (VLLM_CACHE_ROOT under the session's folder).
- ci.sh runs the test files in two pytest-xdist workers (--dist loadfile: a file's module fixtures,
  and so its engines, stay in one worker); session fixtures are each worker's own, and each worker's
  engines keep to one core (``_cores``).
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
ROW = re.compile(r"(\S+)\s+(attention|mamba1|mamba2|short_conv|gated_delta_net)\s+(\S+)\s+"
                 r"(forced by \S+|preferred by \S+|highest priority available)")
PLAN = re.compile(r"mixboard-vllm plan, rank (\d+) of (\d+), .*?fingerprint ([0-9a-f]{16})")


@dataclass
class Run:
    rc: int
    log: str
    ids: list | None
    steps: list[str] = field(default_factory=list)

    @property
    def fingerprints(self) -> dict[int, str]:
        """rank -> fingerprint logged by that rank's plan."""
        return {int(r): fp for r, _, fp in PLAN.findall(self.log)}

    @property
    def table(self) -> dict[str, tuple[str, str, str]]:
        """layer -> (kind, backend, why) from the logged plan table."""
        return {m[0]: m[1:] for m in ROW.findall(self.log)}

    def mixed_steps(self) -> bool:
        """Some step held decodes and prefills together."""
        for s in self.steps:
            seqs, dec = int(re.search(r"seqs=(\d+)", s).group(1)), int(re.search(r"decodes=(\d+)", s).group(1))
            if 0 < dec < seqs:
                return True
        return False


# The variables that vLLM's LLM() process reads once: load_general_plugins runs mixboard's register()
# there once per process, and it changes vLLM's compile config (compat.split_graph_at). A run with
# other values gets a host of its own; every other variable is the request's (engine_host.py).
HOST_KEYS = ("MIXBOARD_VLLM", "MIXBOARD_STRICT_PLUGINS")


class Host:
    """One engine_host.py process: starts the engines of the runs it is given, one at a time."""

    def __init__(self, env: dict, log: str):
        read, write = os.pipe()
        with open(log, "a") as f:
            self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "engine_host.py"), str(write)], env=env,
                                         stdin=subprocess.PIPE, stdout=f, stderr=subprocess.STDOUT, text=True,
                                         cwd=HERE, pass_fds=(write,), start_new_session=True)
        os.close(write)
        self.replies = os.fdopen(read)

    def ask(self, request: dict, timeout: float) -> int:
        """The engine's exit status: 0 when its ids are written, non-zero when it failed (the host ends)."""
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        if not select.select([self.replies], [], [], timeout)[0]:
            self.kill()
            raise subprocess.TimeoutExpired(request["model"], timeout)
        line = self.replies.readline()
        if not line:  # the host died without answering: its engine's processes may remain
            rc = self.proc.wait() or 1
            self.kill()
            return rc
        rc = json.loads(line)["rc"]
        if rc:  # the host ends after a failed engine, skipping vLLM's clean-up: end what it left
            self.proc.wait()
            self.kill()
        return rc

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """The host and whatever it started (its own session: engine core, workers), even after it exited."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:  # nothing of the session left
            pass
        self.proc.wait()

    def close(self) -> None:
        if self.alive():
            self.proc.stdin.close()  # the host's loop ends
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                pass
        self.kill()  # whatever a shutdown left behind in the host's session
        self.replies.close()


HOSTS: dict[tuple, Host] = {}


def close_hosts() -> None:
    while HOSTS:
        HOSTS.popitem()[1].close()


def _host(tmp, env: dict) -> Host:
    key = tuple(env.get(k) for k in HOST_KEYS)
    host = HOSTS.get(key)
    if host is None or not host.alive():
        if host is not None:
            host.close()
        start = {**os.environ, "VLLM_CACHE_ROOT": env["VLLM_CACHE_ROOT"], **{k: env[k] for k in HOST_KEYS if k in env}}
        host = HOSTS[key] = Host(start, os.path.join(tmp, "engine_hosts.log"))
    return host


def _cores(extra: dict) -> str:
    """Where the engine's CPU workers bind their OpenMP threads (vLLM's VLLM_CPU_OMP_THREADS_BIND).
    ci.sh runs the lane in pytest-xdist workers, two at once: each worker's engines keep to a core of
    their own, as vLLM's own default ('auto': one core, one thread, on this 2-core machine) would
    put every engine on core 0. An engine on several ranks takes a core per rank."""
    ranks = extra.get("tensor_parallel_size", 1) * extra.get("pipeline_parallel_size", 1)
    cores = sorted(os.sched_getaffinity(0))  # the cores this process may use, not every core the machine has
    if ranks > 1:
        return "|".join(str(cores[rank % len(cores)]) for rank in range(ranks))
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")  # gw0, gw1, ...
    return str(cores[int(worker.removeprefix("gw") or 0) % len(cores)])


def run(tmp, tag: str, model: str, env: dict | None = None, extra: dict | None = None, timeout: int = 600,
        prompts: list | None = None) -> Run:
    """``prompts``: [prompt ids, max_tokens] pairs to generate instead of run_llm's PROMPTS."""
    out, trace, log = (os.path.join(tmp, f"{tag}.{x}") for x in ("json", "trace", "log"))
    # one compile cache per session, not the user's: a run must never load a graph another session compiled
    e = {**os.environ, "MIXBOARD_VLLM_TRACE": trace, "VLLM_CACHE_ROOT": os.path.join(tmp, "vllm-cache"), **(env or {})}
    e.setdefault("VLLM_CPU_OMP_THREADS_BIND", _cores(extra or {}))
    for stale in (out, trace):
        if os.path.exists(stale):
            os.remove(stale)
    request = {"model": model, "out": out, "log": log, "env": e, "extra": extra or {}}
    if prompts is not None:
        request["prompts"] = prompts
    rc = _host(tmp, e).ask(request, timeout)
    with open(log) as f:
        text = f.read()
    ids = None
    if rc == 0:
        with open(out) as f:
            ids = json.load(f)["ids"]
    steps = open(trace).read().splitlines() if os.path.exists(trace) else []
    return Run(rc, text, ids, steps)


def ok(r: Run) -> Run:
    assert r.rc == 0, r.log[-3000:]
    return r
