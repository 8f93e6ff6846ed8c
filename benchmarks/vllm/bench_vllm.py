"""Tokens/s of one model three ways, in one run: vLLM with its own CPU layers, vLLM with its layers
on mixboard's backends (mixboard-vllm), and mixboard's own runner. Batch 1 and 16, 128-token
prompts, 64 new tokens each, greedy; each engine in its own process, generate() timed after a
warm-up. Run in the vLLM lane's venv:

    LD_PRELOAD=$PWD/.venv-vllm/lib/libiomp5.so .venv-vllm/bin/python benchmarks/vllm/bench_vllm.py [MODEL]

Without MODEL it writes a tiny random llama (integrations/vllm/tests/models.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

PROMPT, NEW, BATCHES = 128, 64, (1, 16)

VLLM = """
import json, time
from vllm import LLM, SamplingParams
llm = LLM(model={path!r}, dtype="float32", enforce_eager=True, skip_tokenizer_init=True, gpu_memory_utilization=0.3,
          max_model_len=512, max_num_seqs=16, block_size=32)
res = {{}}
for b in {batches}:
    prompts = [{{"prompt_token_ids": [(13 * i + 7 * j) % 256 for i in range({prompt})]}} for j in range(b)]
    sp = SamplingParams(temperature=0, max_tokens={new}, ignore_eos=True)
    llm.generate(prompts, sp, use_tqdm=False)
    t = time.perf_counter(); llm.generate(prompts, sp, use_tqdm=False); res[b] = b * {new} / (time.perf_counter() - t)
print("RESULT", json.dumps(res))
"""

RUNNER = """
import json, time
from mixboard_runner.engine import Engine
from mixboard_runner.sampling import SamplingParams
engine = Engine({path!r}, max_seqs=16)
res = {{}}
for b in {batches}:
    prompts = [[(13 * i + 7 * j) % 256 for i in range({prompt})] for j in range(b)]
    sp = SamplingParams(max_tokens={new}, ignore_eos=True)
    engine.generate(prompts, sp)
    t = time.perf_counter(); engine.generate(prompts, sp); res[b] = b * {new} / (time.perf_counter() - t)
print("RESULT", json.dumps(res))
"""


def run(code: str, env: dict) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env})
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode or not lines:
        raise SystemExit(out.stdout[-2000:] + out.stderr[-3000:])
    return {int(k): v for k, v in json.loads(lines[-1][7:]).items()}


def main() -> None:
    if len(sys.argv) > 1:
        path = sys.argv[1]
    else:
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "integrations", "vllm", "tests"))
        from models import llama

        path = os.path.join(tempfile.mkdtemp(), "llama")
        llama(path)
    args = dict(path=path, batches=BATCHES, prompt=PROMPT, new=NEW)
    rows = [("vLLM, its own CPU layers", run(VLLM.format(**args), {"MIXBOARD_VLLM": "0"})),
            ("vLLM, layers on mixboard backends", run(VLLM.format(**args), {"MIXBOARD_VLLM": "1"})),
            ("mixboard's own runner", run(RUNNER.format(**args), {}))]
    print(f"| engine ({os.path.basename(path)}, float32, {PROMPT}-token prompts, {NEW} new) | "
          + " | ".join(f"batch {b} tok/s" for b in BATCHES) + " |")
    print("| --- |" + " ---: |" * len(BATCHES))
    for name, res in rows:
        print(f"| {name} | " + " | ".join(f"{res[b]:.0f}" for b in BATCHES) + " |")
    print(f"load average: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
