"""Tokens/s of one model three ways, in one run: vLLM with its own CPU layers, vLLM with its layers
on mixboard's backends (mixboard-vllm), and mixboard's own runner. Batch 1 and 16, 128-token
prompts, 64 new tokens each, greedy; each engine in its own process, generate() timed after a
warm-up. Run in the vLLM lane's venv:

    LD_PRELOAD=$PWD/.venv-vllm/lib/libiomp5.so .venv-vllm/bin/python benchmarks/vllm/bench_vllm.py [MODEL] [--rounds N]

Without MODEL it writes a tiny random llama (integrations/vllm/tests/models.py). The engines take
turns, round after round, and the table gives each one's median and range."""

from __future__ import annotations

import argparse
import json
import os
import statistics
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
engine = Engine({path!r}, max_seqs=16, reuse_host_memory=True)  # as `mixboard run` does
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
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", help="checkpoint directory (default: a tiny random llama written here)")
    ap.add_argument("--size", choices=("tiny", "runner"), default="tiny",
                    help="without MODEL: 'tiny' (3 layers, hidden 128: the integration's per-step cost) or 'runner' "
                         "(benchmarks/runner's ~40 M llama: 8 layers, hidden 512, vocab 32,000)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds; each runs every engine once, alternating (default 3)")
    args = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    if args.model:
        path = args.model
    elif args.size == "tiny":
        sys.path.insert(0, os.path.join(here, "..", "..", "integrations", "vllm", "tests"))
        from models import llama

        path = os.path.join(tempfile.mkdtemp(), "llama")
        llama(path)
    else:
        sys.path.insert(0, os.path.join(here, "..", "runner"))
        from bench_runner import CHECKPOINTS

        path = os.path.join(tempfile.mkdtemp(), "llama-40m")
        # its own import line: this venv's transformers cannot `import *`
        code = (f"import torch\nfrom transformers import LlamaConfig, LlamaForCausalLM\ntorch.manual_seed(0)\n"
                f"LlamaForCausalLM({CHECKPOINTS['llama']}).save_pretrained({path!r})")
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    fmt = dict(path=path, batches=BATCHES, prompt=PROMPT, new=NEW)
    engines = [("vLLM, its own CPU layers", VLLM, {"MIXBOARD_VLLM": "0"}),
               ("vLLM, layers on mixboard backends", VLLM, {"MIXBOARD_VLLM": "1"}),
               ("mixboard's own runner", RUNNER, {})]
    results: dict[str, list[dict]] = {name: [] for name, _, _ in engines}
    for r in range(args.rounds):
        order = engines if r % 2 == 0 else engines[::-1]  # alternate, so that drift hits every side alike
        for name, code, env in order:
            results[name].append(run(code.format(**fmt), env))
            print(f"round {r + 1}/{args.rounds}: {name}: " + ", ".join(
                f"batch {b} {results[name][-1][b]:.0f} tok/s" for b in BATCHES), file=sys.stderr)
    print(f"| engine ({os.path.basename(path)}, float32, {PROMPT}-token prompts, {NEW} new; median (range) of "
          f"{args.rounds}) | " + " | ".join(f"batch {b} tok/s" for b in BATCHES) + " |")
    print("| --- |" + " ---: |" * len(BATCHES))
    for name, runs in results.items():
        cells = []
        for b in BATCHES:
            v = sorted(x[b] for x in runs)
            cells.append(f"{statistics.median(v):.0f} ({v[0]:.0f}-{v[-1]:.0f})")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(f"load average: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
