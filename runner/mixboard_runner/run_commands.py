"""CLI commands that run models: ``run`` and ``explain``."""

from __future__ import annotations

import json
import re
import sys
import time

from . import environment_flags, locking, option_flags, rule_flags, threads
from .table import render

DEFAULT_PROMPT = "The mixers of a hybrid model"
MODEL_HELP = "a Hugging Face style folder (config.json + *.safetensors), or 'demo' (default: demo)"


def add_commands(commands) -> None:
    p = commands.add_parser(
        "run", help="generate text with a model through the registry",
        description="Load a model, plan a backend for every layer, and generate for each prompt with continuous "
                    "batching. Prints the plan, the outputs and the throughput; on a terminal, each output's tokens "
                    "as they are made. Ctrl-C stops it (exit status 130). Being the whole program, it keeps large "
                    "freed blocks in the process's heap for reuse instead of returning them to the OS (glibc; "
                    "Engine(reuse_host_memory=True)).",
        epilog="examples:\n  mixboard run\n  mixboard run ./my-llama --prompt 'Once upon a time' --max-tokens 64\n"
               "  mixboard run demo --prompt-ids 72,105 --backend attention=sdpa --json",
        formatter_class=_raw())
    p.add_argument("model", nargs="?", default="demo", metavar="MODEL", help=MODEL_HELP)
    p.add_argument("--prompt", action="append", default=[], metavar="TEXT", help="a prompt (repeat for a batch)")
    p.add_argument("--prompt-ids", action="append", default=[], metavar="1,2,3",
                   help="a prompt as token ids (repeat for a batch; for models without tokenizer.json)")
    p.add_argument("--max-tokens", type=int, default=32, metavar="N", help="new tokens per prompt (default 32)")
    p.add_argument("--temperature", type=float, default=0.0, metavar="T", help="0 is greedy (default)")
    p.add_argument("--top-p", type=float, default=None, metavar="P", help="nucleus sampling (needs temperature > 0)")
    p.add_argument("--top-k", type=int, default=None, metavar="K", help="top-k sampling (needs temperature > 0)")
    p.add_argument("--seed", type=int, default=None, metavar="S", help="sampling seed (needs temperature > 0)")
    p.add_argument("--ignore-eos", action="store_true", help="keep generating past the end-of-sequence token")
    _add_common(p, lock=True)
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    p.add_argument("--cache-memory", default="512MiB", metavar="SIZE",
                   help="memory for the state pools, e.g. 256MiB, 2GiB, or bytes (default 512MiB)")
    p.add_argument("--allow-nonfinite-weights", action="store_true",
                   help="load weights that hold NaN or Inf (with a warning) instead of refusing them")
    threads.add_flag(p)
    p.add_argument("--json", action="store_true", help="print a JSON object (stable contract)")
    p.set_defaults(run=cmd_run)

    p = commands.add_parser(
        "explain", help="per-layer backend choice and every rejected candidate's reasons, without loading weights",
        description="Plan a model without loading its weights: the backend chosen for every layer (its mixers "
                    "and its dense ops: products, norms, rotary, embedding, argmax), why every other candidate was "
                    "rejected, once for all the layers that share the choice and its reasons, and the groups of layers "
                    "that share a backend and state layout.",
        epilog="examples:\n  mixboard explain ./my-hybrid --arch sm_90 --json\n  mixboard explain ./my-hybrid --arch gfx942\n"
               "  mixboard explain ./my-hybrid --backend linear=linear_torch       every product on portable PyTorch\n"
               "  mixboard explain ./my-hybrid --backend 'model.layers.3.*=sdpa'  block 3's attention alone\n\n"
               + environment_flags.EPILOG, formatter_class=_raw())
    p.add_argument("model", nargs="?", default="demo", metavar="MODEL", help=MODEL_HELP)
    _add_common(p, lock=True)
    environment_flags.add_flags(p, device=False)
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    p.add_argument("--json", action="store_true", help="print a JSON object (stable contract)")
    p.set_defaults(run=cmd_explain)


def _raw():
    import argparse

    return argparse.RawDescriptionHelpFormatter


def _add_common(p, lock: bool = False) -> None:
    rule_flags.add_flags(p)
    if lock:
        locking.add_flag(p)
    option_flags.add_flag(p)
    p.add_argument("--device", default=None, help="torch device (run: the device to run on, default cpu; explain: "
                                                  "simulate this device type, default this machine)")


def explain_dict(plan) -> dict:
    """The plan as explain and run print it: Plan.to_dict without each layer's spec (a 60-layer model
    would repeat it 60 times; `select` shows one), and ``choices``: the reasons once for all the layers
    that got the same backend for the same reasons."""
    data = plan.to_dict()
    data["layers"] = [{k: v for k, v in layer.items() if k != "spec"} for layer in data["layers"]]
    data["choices"] = [{"kind": c.kind, "phase": c.phase, "backend": c.backend, "rule": c.rule,
                        "preferred_by": c.preferred_by, "layers": c.names,
                        "rejected": {n: list(r) for n, r in c.rejected}} for c in choices(plan)]
    return data


class Choice:
    """Layers of one kind that got one backend for the same reasons (for one phase of their rows,
    where ``phase`` is set: layers split by phase)."""

    def __init__(self, kind, phase, backend, rule, preferred_by, rejected):
        self.kind, self.phase, self.backend, self.rule = kind, phase, backend, rule
        self.preferred_by, self.rejected = preferred_by, rejected
        self.names: list[str] = []

    @property
    def target(self) -> str:
        """The kind, with the phase as rules write it (``attention@decode``)."""
        return f"{self.kind}@{self.phase}" if self.phase else self.kind


def products(plan) -> str:
    """The backends that ran the model's products (kind linear), for ``run --json``'s stats."""
    return ", ".join(dict.fromkeys(layer.backend for layer in plan.layers if layer.kind == "linear"))


def choices(plan) -> list[Choice]:
    """The plan's layers grouped by (kind, backend, rule, reasons), in order of first appearance."""
    found: dict[tuple, Choice] = {}
    for layer in plan.layers:
        phases = ((None, layer.selection),) if not layer.split else (
            ("prefill", layer.selection), ("decode", layer.decode_selection))
        for phase, s in phases:
            key = (layer.kind, phase, s.chosen.name, s.rule, s.preferred_by, tuple(s.rejected.items()))
            choice = found.get(key)
            if choice is None:
                choice = found[key] = Choice(*key)
            choice.names.append(layer.name)
    return list(found.values())


def group_backend(group) -> str:
    return group.backend if group.decode_backend is None else f"{group.backend} (prefill), {group.decode_backend} (decode)"


def print_plan(plan, verbose: bool) -> None:
    print(f"plan {plan.fingerprint} on {plan.environment}: {len(plan.layers)} layers in {len(plan.groups)} groups")
    rows = [[g.kind, group_backend(g), str(len(g.layers)), names_of(g.layers)] for g in plan.groups]
    print(render(["kind", "backend", "layers", "names"], rows))
    if plan.options:  # every option of the backends used that declare any: what ran, defaults included
        print("backend options: " + option_flags.text(plan.options))
    if verbose:
        for layer in plan.layers:
            for name, reasons in layer.rejected.items():
                print(f"  {layer.name}{' (prefill)' if layer.split else ''}: not {name}: {'; '.join(reasons)}")
            if layer.split:
                for name, reasons in layer.decode_selection.rejected.items():
                    print(f"  {layer.name} (decode): not {name}: {'; '.join(reasons)}")


def names_of(names) -> str:
    """Layer names in a few words: patterns over the layer index, the parts after it in braces
    (``model.layers.*.{self_attn.qkv_proj,mlp.down_proj}, lm_head``)."""
    groups: dict[str, list[str]] = {}  # the part up to the index -> the parts after it, in order
    for name in names:
        head, star, tail = re.sub(r"\.\d+\.", ".*.", name).partition(".*.")
        tails = groups.setdefault(head + star, [])
        if tail not in tails:
            tails.append(tail)
    return ", ".join(head if tails == [""] else head + (tails[0] if len(tails) == 1 else "{" + ",".join(tails) + "}")
                     for head, tails in groups.items())


def cmd_explain(args) -> int:
    from mixboard import get_registry

    from .loader import build_model
    from .locking import planned

    model = build_model(args.model, args.dtype)
    env, notes = environment_flags.resolve(args)
    registry = get_registry()
    plan = planned(registry, model.layer_decls(), env, rule_flags.forced(args), rule_flags.preferred(args),
                   locking.given(args), option_flags.given(args), model.info.model_type)
    if args.json:
        print(json.dumps(explain_dict(plan), indent=2))
        return 0
    print_plan(plan, verbose=False)
    for note in notes:
        print(f"  ({note})")
    print()
    rows = []
    for c in choices(plan):
        rejected = "; ".join(f"{n}: {', '.join(r)}" for n, r in c.rejected) or "-"
        how = " (forced)" if c.rule else " (preferred)" if c.preferred_by else ""
        rows.append([names_of(c.names), str(len(c.names)), c.target, c.backend + how, rejected])
    print(render(["layers", "count", "kind", "backend", "rejected"], rows))
    return 0


def parse_size(text: str) -> int:
    from mixboard.errors import UsageError

    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(|b|kib|mib|gib|kb|mb|gb)\s*", text.lower())
    if not match:
        raise UsageError(f"bad size {text!r}: write bytes or a number with KiB, MiB, GiB (e.g. 512MiB)")
    unit = {"": 1, "b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "kb": 10**3, "mb": 10**6, "gb": 10**9}
    size = float(match.group(1)) * unit[match.group(2)]
    if not size < 2**63:
        raise UsageError(f"size {text!r} is too large")
    return int(size)


def parse_ids(text: str) -> list[int]:
    from mixboard.errors import UsageError

    try:
        return [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise UsageError(f"bad --prompt-ids {text!r}: write comma-separated token ids, e.g. 1,2,3") from None


def cmd_run(args) -> int:
    from mixboard.errors import UsageError

    from .sampling import SamplingParams

    if args.temperature == 0 and any(v is not None for v in (args.top_p, args.top_k, args.seed)):
        raise UsageError("--top-p, --top-k and --seed only apply when sampling: add --temperature > 0")
    params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, top_k=args.top_k or 0,
                            top_p=args.top_p if args.top_p is not None else 1.0, seed=args.seed,
                            ignore_eos=args.ignore_eos)
    used_threads = threads.apply(args)
    busy = threads.busy_line(args, "run", used_threads)  # taken before the run's own load
    _generate(args, params, used_threads)
    sys.stderr.write(busy or "")  # said after a run that ended well: a mistake or failure keeps its one line
    return 0


def _generate(args, params, used_threads: int) -> None:
    """Load the model, generate, and print what ``mixboard run`` shows (text, streamed text, or JSON)."""
    from mixboard.errors import UsageError

    from .engine import Engine

    engine = Engine(args.model, device=args.device or "cpu", dtype=args.dtype, backend=rule_flags.forced(args),
                    prefer=rule_flags.preferred(args), lock=locking.given(args) or "",
                    backend_options=option_flags.given(args) or "",
                    cache_memory=parse_size(args.cache_memory), allow_nonfinite_weights=args.allow_nonfinite_weights,
                    reuse_host_memory=True)  # the whole program: its allocator is ours to tune
    prompts: list = [parse_ids(t) for t in args.prompt_ids] + list(args.prompt)
    if not prompts:
        if engine.tokenizer is None:
            raise UsageError("this model has no tokenizer.json: give prompts with --prompt-ids 1,2,3")
        prompts = [DEFAULT_PROMPT]
    if args.prompt and engine.tokenizer is None:
        raise UsageError("this model has no tokenizer.json: give prompts with --prompt-ids instead of --prompt")
    if not args.json and sys.stdout.isatty():  # a person watching: tokens as they come
        started = time.perf_counter()
        tokens = engine.stream(prompts, params)  # checks every prompt before the first step
        print_plan(engine.plan, verbose=False)
        _print_streamed(tokens, len(prompts))
        engine.stats.wall_s = time.perf_counter() - started
        _print_stats(engine.stats.to_dict(), used_threads)
        return
    progress = None if args.json or not sys.stderr.isatty() else _Progress(len(prompts) * args.max_tokens)
    outputs = engine.generate(prompts, params, progress=progress)
    if progress:
        progress.close()
    stats = engine.stats.to_dict()
    if args.json:
        print(json.dumps({"plan": explain_dict(engine.plan),
                          "outputs": [{"prompt_ids": o.prompt_ids, "output_ids": o.output_ids, "text": o.text,
                                       "finish_reason": o.finish_reason} for o in outputs],
                          "stats": {k: stats[k] for k in ("prefill_tokens", "decode_tokens", "prefill_tokens_per_s",
                                                          "decode_tokens_per_s", "wall_s", "preemptions")}
                          | {"projections": products(engine.plan), "threads": used_threads}}, indent=2))
        return
    print_plan(engine.plan, verbose=False)
    for i, out in enumerate(outputs):
        shown = out.text if out.text is not None else ",".join(map(str, out.output_ids))
        print(f"\n[{i}] {len(out.prompt_ids)} prompt tokens -> {len(out.output_ids)} new ({out.finish_reason}):\n{shown!r}")
    _print_stats(stats, used_threads)


def _print_stats(stats: dict, count: int) -> None:
    print(f"\nprefill {stats['prefill_tokens']} tokens at {stats['prefill_tokens_per_s']:.0f} tok/s, "
          f"decode {stats['decode_tokens']} tokens at {stats['decode_tokens_per_s']:.0f} tok/s, "
          f"{stats['wall_s']:.2f} s, {count} thread{'s' if count > 1 else ''}")


def _print_streamed(tokens, count: int) -> None:
    """Each output in prompt order, its tokens printed as they are made; the
    tokens of later outputs, made meanwhile, wait for their turn."""
    held: list[list] = [[] for _ in range(count)]  # tokens not on screen yet
    ended = [False] * count
    shown = 0  # the output on screen now
    print("\n[0]")
    for token in tokens:
        held[token.index].append(token)
        while shown < count:
            for t in held[shown]:
                sys.stdout.write(_piece(t))
                if t.finish_reason:
                    sys.stdout.write(f"\n({t.finish_reason})\n")
                    ended[shown] = True
            held[shown] = []
            if not ended[shown]:
                break
            shown += 1
            if shown < count:
                sys.stdout.write(f"\n[{shown}]\n")
        sys.stdout.flush()
    for i in range(shown + 1, count):  # outputs that ended without a token of their own to show them
        sys.stdout.write(f"\n[{i}]\n" + "".join(_piece(t) for t in held[i]))
    sys.stdout.flush()


def _piece(token) -> str:
    """What a streamed token shows: its text, or its id for a model without a tokenizer."""
    return token.text if token.text is not None else f"{token.token_id},"


class _Progress:
    """A one-line progress bar on stderr for interactive runs."""

    def __init__(self, total: int):
        self.total, self.start, self.shown = total, time.perf_counter(), False

    def __call__(self, engine, finished) -> None:
        done = engine.stats.decode_tokens + sum(1 for _ in finished)
        if time.perf_counter() - self.start < 1.0:
            return
        frac = min(1.0, done / max(1, self.total))
        sys.stderr.write(f"\r[{'#' * int(30 * frac):<30}] {done}/{self.total} tokens")
        self.shown = True

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\n")
