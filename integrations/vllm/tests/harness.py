"""Run one vLLM engine per process (run_llm.py) and read what it did: ids, log, plan, steps."""

from __future__ import annotations

import json
import os
import re
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


def run(tmp, tag: str, model: str, env: dict | None = None, extra: dict | None = None, timeout: int = 600) -> Run:
    out, trace, log = (os.path.join(tmp, f"{tag}.{x}") for x in ("json", "trace", "log"))
    # one compile cache per session, not the user's: a run must never load a graph another session compiled
    e = {**os.environ, "MIXBOARD_VLLM_TRACE": trace, "VLLM_CACHE_ROOT": os.path.join(tmp, "vllm-cache"), **(env or {})}
    cmd = [sys.executable, os.path.join(HERE, "run_llm.py"), model, out] + ([json.dumps(extra)] if extra else [])
    with open(log, "w") as f:
        rc = subprocess.run(cmd, env=e, stdout=f, stderr=subprocess.STDOUT, timeout=timeout, cwd=HERE).returncode
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
