"""`mixboard run --threads N` on a machine other processes keep busy: what a thread team costs there.

    python benchmarks/runner/bench_threads.py [--model demo] [--busy 0,1,2] [--threads 1,2] [--pairs 5]
                                              [--max-tokens 64] [--prompts 4] [--json]

For each level of ``--busy``, that many processes spin on the cores (pure Python loops) while
``mixboard run --json`` generates with each ``--threads`` value in turn, the order alternating from
pair to pair so that both meet the same machine. Reports each side's median decode and prefill
rates and their ranges (stats of the run's own JSON: the generation, not the start-up).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

SPIN = "while True: pass"


def run(model: str, threads: int, max_tokens: int, prompts: int) -> dict:
    ids = [["--prompt-ids", ",".join(str(7 + i + j) for j in range(24))] for i in range(prompts)]
    cmd = [sys.executable, "-m", "mixboard_runner", "run", model, "--json", "--ignore-eos", "--threads", str(threads),
           "--max-tokens", str(max_tokens), *[a for pair in ids for a in pair]]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["stats"]


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="demo")
    ap.add_argument("--busy", default="0,1,2", help="spinning processes beside the run, per level")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    levels = [int(b) for b in args.busy.split(",")]
    teams = [int(t) for t in args.threads.split(",")]
    rows = []
    for busy in levels:
        spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(busy)]
        try:
            time.sleep(1.0)
            got: dict[int, list[dict]] = {t: [] for t in teams}
            for pair in range(args.pairs):
                for t in (teams if pair % 2 == 0 else teams[::-1]):
                    got[t].append(run(args.model, t, args.max_tokens, args.prompts))
                    print(f"busy {busy}, threads {t}: decode {got[t][-1]['decode_tokens_per_s']:.0f} tok/s",
                          file=sys.stderr)
        finally:
            for p in spinners:
                p.kill()
        for t in teams:
            rows.append({"busy": busy, "threads": t,
                         "decode_tok_s": [s["decode_tokens_per_s"] for s in got[t]],
                         "prefill_tok_s": [s["prefill_tokens_per_s"] for s in got[t]]})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print("| busy processes | threads | decode tok/s | prefill tok/s |")
    print("| ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['busy']} | {r['threads']} | {spread(r['decode_tok_s'])} | {spread(r['prefill_tok_s'])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
