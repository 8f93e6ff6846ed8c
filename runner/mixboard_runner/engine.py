"""The engine: schedule -> common metadata -> one build per (group, spec) ->
forward -> sample. It never names a kind and never tests a layer's type:
everything kind-specific arrives through the plan (backends, builders,
state specs) and the model's own layers.

Failures are atomic. A step that raises (a backend, an interrupt, anything)
holds no block or slot afterwards: the sequences of its batch go back to
waiting and are recomputed from their tokens, so state a step half wrote is
never read. A ``generate``, ``stream`` or ``score`` call that raises (or a
stream its consumer closes) aborts its own requests. One lock serializes
steps, so several threads may share an engine: each thread's requests are
batched with everybody's, and each thread gets its own outputs."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping

import torch

from mixboard import CommonBatchMetadata, get_registry
from mixboard.dtypes import DTYPES, torch_dtype
from mixboard.environment import for_device
from mixboard.errors import UsageError
from mixboard.ops.checks import build_builder, build_impl
from mixboard.ops.phase_split import SplitImpl, StepRows, split_builder

from . import checks
from .blame import blamed, blaming
from .cache import DEFAULT_BLOCK_SIZE, CacheManager
from .host_memory import reuse_freed_memory
from .loader import build_model, load_model
from .locking import planned
from .tokenizer import encode_prompt, load_tokenizer
from .sampling import SamplingParams, sample
from .scheduler import Scheduler
from .sequence import Sequence, Status

DEFAULT_CACHE_MEMORY = 512 * 2**20


class StepContext:
    """What a model's stateful layers see during one step: their impl, state
    and the metadata their backend's builder made."""

    __slots__ = ("runtimes", "metas")

    def __init__(self, runtimes, metas):
        self.runtimes, self.metas = runtimes, metas

    def lookup(self, layer_name: str):
        impl, state, builder_id = self.runtimes[layer_name]
        return impl, state, self.metas[builder_id]


@dataclass(frozen=True)
class Token:
    """One generated token, as ``Engine.stream`` yields it: ``index`` is the
    prompt's place in the call; ``text`` is what the token adds to the output
    text (it may be empty until a character is complete; None without a
    tokenizer); ``finish_reason`` is set on a request's last token."""

    index: int
    token_id: int
    text: str | None
    finish_reason: str | None


@dataclass
class Output:
    prompt_ids: list[int]
    output_ids: list[int]
    text: str | None
    finish_reason: str


@dataclass
class Stats:
    prefill_tokens: int = 0
    decode_tokens: int = 0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    wall_s: float = 0.0
    steps: int = 0
    preemptions: int = 0

    def to_dict(self) -> dict:
        rate = lambda n, s: n / s if s > 0 else 0.0  # noqa: E731
        return {"prefill_tokens": self.prefill_tokens, "decode_tokens": self.decode_tokens,
                "prefill_tokens_per_s": rate(self.prefill_tokens, self.prefill_s),
                "decode_tokens_per_s": rate(self.decode_tokens, self.decode_s), "wall_s": self.wall_s,
                "steps": self.steps, "preemptions": self.preemptions}


class Engine:
    def __init__(self, model: str | Path | None = None, *, device: str = "cpu", dtype: str = "float32",
                 backend: str | None = None, prefer: str | None = None, cache_memory: int = DEFAULT_CACHE_MEMORY, max_seqs: int = 64,
                 max_batched_tokens: int = 2048, block_size: int = DEFAULT_BLOCK_SIZE, tokenizer=None,
                 registry=None, reuse_host_memory: bool = False, allow_nonfinite_weights: bool = False,
                 lock=None, backend_options: str | Mapping | None = None):
        """``reuse_host_memory``: keep large freed blocks in the process's heap
        for reuse (glibc only; see host_memory.py). Off by default: it
        changes the whole process's allocator, which a library must not do
        unasked; ``mixboard run``, a whole program, asks for it.
        ``allow_nonfinite_weights``: load weights holding NaN or Inf (with a
        warning) instead of refusing them. ``backend`` forces backends and
        ``prefer`` prefers them where they can serve (rules as ``mixboard run
        --backend`` / ``--prefer`` take them); left None, each takes its
        environment variable ($MIXBOARD_BACKEND, $MIXBOARD_PREFER), as the
        CLI does. Give "" for no rules whatever the environment says.
        ``lock``: a lock file's path (or a ``mixboard.lock.Lock``) whose choices
        to reproduce exactly, or fail saying what differs (``mixboard lock``);
        left None, $MIXBOARD_LOCK; "" for none. Rules and backend options cannot be
        combined with it (the lock carries the options it was made with).
        ``backend_options`` sets backends' options: text as ``--backend-option``
        takes it (``linear_onednn.layout=as_loaded,...``) or a mapping
        {backend: {option: value}}; None takes $MIXBOARD_BACKEND_OPTIONS."""
        # every argument is checked before anything is loaded or allocated
        if dtype not in DTYPES:
            raise UsageError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
        if model is not None:
            checks.instance("model", model, (str, os.PathLike), "a folder's path or 'demo'")
        backend = os.environ.get("MIXBOARD_BACKEND") if backend is None else backend
        prefer = os.environ.get("MIXBOARD_PREFER") if prefer is None else prefer
        lock = (os.environ.get("MIXBOARD_LOCK") or None) if lock is None else (lock or None)
        if backend is not None:
            checks.instance("backend", backend, str, "rules as text (KIND=BACKEND,...)")
        if prefer is not None:
            checks.instance("prefer", prefer, str, "rules as text (KIND=BACKEND,...)")
        if backend_options is None:
            backend_options = os.environ.get("MIXBOARD_BACKEND_OPTIONS")
        if backend_options is not None:
            checks.instance("backend_options", backend_options, (str, Mapping),
                            "text (BACKEND.OPTION=VALUE,...) or {backend: {option: value}}")
        if lock is not None:
            from mixboard.lock import Lock

            checks.instance("lock", lock, (str, os.PathLike, Lock), "a lock file's path or a mixboard.lock.Lock")
        cache_memory = checks.integer("cache_memory", cache_memory, 1)
        max_seqs = checks.integer("max_seqs", max_seqs, 1)
        max_batched_tokens = checks.integer("max_batched_tokens", max_batched_tokens, 1)
        block_size = checks.integer("block_size", block_size, 1, 1 << 20)
        checks.flag("reuse_host_memory", reuse_host_memory)
        checks.flag("allow_nonfinite_weights", allow_nonfinite_weights)
        self.env = for_device(device)
        self.device = torch.device(device)
        _check_fits_memory(cache_memory, self.device)
        if reuse_host_memory:
            reuse_freed_memory()
        self.registry = registry or get_registry()
        # the plan (strict rules) and the tokenizer first: a mistake in either costs no weight load
        shell = build_model(model, dtype)
        self.plan = planned(self.registry, shell.layer_decls(), self.env, backend, prefer, lock, backend_options,
                            shell.info.model_type)
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(model)
        self.model = load_model(model, dtype, device, allow_nonfinite=allow_nonfinite_weights)
        self._owners = {}  # id(impl or builder) -> (backend, layer): whom an error blames
        self._bind_stateless()  # before the pools: an impl that re-lays its weights does it with the least held
        self.cache = CacheManager(self.plan, self.device, cache_memory, max_seqs, block_size)
        self.scheduler = Scheduler(self.cache, self.cache.max_seqs, max_batched_tokens)
        self.stats = Stats()
        self._lock = threading.RLock()  # one step (and one change of the queues) at a time
        self._stepping = None  # the thread inside a step: see _drop
        self._dropped: list[list[Sequence]] = []
        self._bind_stateful()

    def _impl(self, selection, layer):
        backend = selection.chosen.name
        with blaming(backend, layer.name, "making its impl"):
            impl = build_impl(selection.backend, layer.spec, self.env, layer.name, self.plan.options.get(backend))
        self._owners[id(impl)] = (backend, layer.name)
        return impl

    def _split(self, layer, make_impl, rows=None):
        """A layer split by phase (``mixboard.phases``): its two impls behind one."""
        prefill, decode = make_impl(layer.selection), make_impl(layer.decode_selection)
        return SplitImpl(prefill, decode, self.registry.kind(layer.kind).row_inputs, rows)

    def _bind_stateless(self) -> None:
        """Layers that keep no state (the dense ops): each impl takes its layer's weights once
        (``load``) and runs on its inputs alone. A layer split by phase has an impl per phase, each
        preparing the weights its own way: one that packs them (panels, a oneDNN layout) keeps a
        copy, so a split product may hold its weights twice."""
        modules = self.model.layers()
        self._rows = StepRows()  # a split op's cut, set every step
        for layer in self.plan.layers:
            if layer.selection.state_spec.tensors:
                continue

            def loaded(selection, layer=layer):
                impl = self._impl(selection, layer)
                with blaming(selection.chosen.name, layer.name, "loading its weights"):
                    modules[layer.name].load_into(impl)
                return impl

            impl = self._split(layer, loaded, self._rows) if layer.split else loaded(layer.selection)
            modules[layer.name].bind(impl)

    def _bind_stateful(self) -> None:
        """Layers that keep state: an impl per layer, its pools, and one builder per
        (backend, spec) that makes the step's metadata for its layers (per pair of them, for
        layers split by phase)."""
        builders: dict[tuple, int] = {}
        self.builders = []
        self.runtimes = {}
        for layer in self.plan.layers:
            if not layer.selection.state_spec.tensors:
                continue
            key = (layer.backend, layer.decode_backend, layer.spec)
            if key not in builders:
                builders[key] = len(self.builders)
                build = self._builder(layer.selection, layer)
                if layer.split:
                    build = split_builder(build, self._builder(layer.decode_selection, layer))
                self.builders.append(build)
            impl = self._split(layer, lambda s: self._impl(s, layer)) if layer.split else self._impl(layer.selection, layer)
            self.runtimes[layer.name] = (impl, self.cache.pools[layer.name], builders[key])

    def _builder(self, selection, layer):
        backend = selection.chosen.name
        with blaming(backend, layer.name, "making its builder"):
            built = build_builder(selection.backend, layer.spec, self.env, self.plan.options.get(backend))
        for owner in (built, getattr(built, "__self__", None)):  # an object, or a bound method's object
            if owner is not None:
                self._owners[id(owner)] = (backend, layer.name)
        return built

    # -- limits ----------------------------------------------------------
    @property
    def max_tokens_per_sequence(self) -> float:
        limit = self.cache.token_capacity
        if self.model.info.max_positions is not None:
            limit = min(limit, self.model.info.max_positions)
        return limit

    def _check_prompt(self, ids) -> list[int]:
        ids = list(checks.token_ids("a prompt", ids))
        if not ids:
            raise UsageError("a prompt needs at least one token")
        vocab = self.model.info.vocab_size
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise UsageError(f"token id {bad[0]} is outside the vocabulary (0..{vocab - 1})")
        if len(ids) > self.max_tokens_per_sequence:
            raise UsageError(f"a prompt of {len(ids)} tokens is longer than this model and cache allow "
                             f"({int(self.max_tokens_per_sequence)} tokens; raise --cache-memory for more)")
        return ids

    # -- one step --------------------------------------------------------
    @torch.inference_mode()
    def _forward(self, batch: list[tuple[Sequence, int]], all_logits: bool) -> torch.Tensor:
        """Run one step. Returns the logits of every row (all_logits), else one
        row for each sequence whose last token is in this step, in batch order
        (a prefill chunk that leaves tokens for later wants none)."""
        ids, positions, last = [], [], []
        for seq, n in batch:
            start = seq.num_computed
            ids.extend(seq.tokens[start:start + n])
            positions.extend(range(start, start + n))
            if start + n == len(seq.tokens):
                last.append(len(ids) - 1)
        common = CommonBatchMetadata.build(
            [n for _, n in batch], [s.num_computed for s, _ in batch],
            [s.slot if s.slot is not None else 0 for s, _ in batch], [s.blocks for s, _ in batch],
            self.cache.block_size, self.device)
        self._rows.num_decodes = common.num_decodes
        step = StepContext(self.runtimes, [build(common) for build in self.builders])
        # every row is wanted (scoring, or a decode-only step): no gather
        rows = None if all_logits or len(last) == len(ids) else torch.tensor(last, dtype=torch.int64,
                                                                              device=self.device)
        hidden = self.model(torch.tensor(ids, device=self.device), torch.tensor(positions, device=self.device),
                            step, rows)
        for seq, n in batch:
            seq.num_computed += n
        return self.model.logits(hidden)

    def step(self) -> list[Sequence]:
        """Run one scheduled step; returns the sequences that finished in it
        (none, and no work done, when nothing is waiting or running).

        If the step raises, the sequences it scheduled hold no block or slot
        and wait to be recomputed from their tokens; the error propagates."""
        with self._lock, blamed(self._owners):
            while self._dropped:
                self._abort_unfinished(self._dropped.pop())
            batch = []
            self._stepping = threading.get_ident()
            try:
                batch = self.scheduler.schedule()
                if not batch:
                    return self._unschedulable() if self.scheduler.waiting else []
                return self._run(batch)
            except BaseException:
                self.scheduler.recompute([seq for seq, _ in batch])
                raise
            finally:
                self._stepping = None

    def _run(self, batch: list[tuple[Sequence, int]]) -> list[Sequence]:
        started = time.perf_counter()
        logits = self._forward(batch, all_logits=False)
        ready = [seq for seq, _ in batch if seq.num_uncomputed == 0]
        finished = []
        if ready:
            tokens = sample(logits, [s.params for s in ready], [s.generator for s in ready], self.model.argmax)
            for seq, token in zip(ready, tokens):
                seq.tokens.append(token)
                reason = self._stop_reason(seq, token)
                if reason:
                    self.scheduler.finish(seq, reason)
                    finished.append(seq)
        elapsed = time.perf_counter() - started
        decodes = sum(1 for seq, n in batch if n == 1 and seq.num_computed > 1)
        prefill_tokens = sum(n for _, n in batch) - decodes
        self.stats.steps += 1
        self.stats.decode_tokens += decodes
        self.stats.prefill_tokens += prefill_tokens
        # a mixed step's time is split between prefill and decode by token count
        total = decodes + prefill_tokens
        self.stats.decode_s += elapsed * decodes / total
        self.stats.prefill_s += elapsed * prefill_tokens / total
        return finished

    def _stop_reason(self, seq: Sequence, token: int) -> str | None:
        p = seq.params
        if not p.ignore_eos and token in self.model.info.eos_token_ids:
            return "stop"
        if token in p.stop_token_ids:
            return "stop"
        if len(seq.output_ids) >= p.max_tokens:
            return "length"
        if len(seq.tokens) >= self.max_tokens_per_sequence:
            return "length"
        return None

    def _unschedulable(self) -> list[Sequence]:
        # Nothing fits even alone: the first waiting sequence outgrew the cache.
        seq = self.scheduler.waiting.popleft()
        self.scheduler.finish(seq, "length")
        return [seq]

    # -- public API ------------------------------------------------------
    def add(self, prompt_ids: list[int], params: SamplingParams | None = None) -> Sequence:
        ids = self._check_prompt(prompt_ids)
        seq = Sequence(ids, checks.instance("params", params or SamplingParams(), SamplingParams))
        with self._lock:
            self.scheduler.add(seq)
        return seq

    def abort(self, seq: Sequence) -> None:
        with self._lock:
            if seq.status is not Status.FINISHED:
                self.scheduler.abort(seq)

    def stream(self, prompts: list[list[int]] | list[str], params: SamplingParams | None = None) -> Iterator[Token]:
        """Generate for every prompt, yielding each token as it is made.

        Prompts are checked when this is called and queued at the first
        ``next()``; closing the iterator early, or an error, aborts this
        call's requests."""
        return self._follow(self._requests(prompts, params))

    def generate(self, prompts: list[list[int]] | list[str], params: SamplingParams | None = None,
                 progress=None) -> list[Output]:
        """Generate for every prompt (token ids, or text when a tokenizer is set).
        ``progress(engine, finished_sequences)`` is called after each step.

        ``engine.stats`` then holds the steps since the last generate that
        began on an idle engine: with several threads, everybody's steps."""
        started = time.perf_counter()
        seqs = self._requests(prompts, params)
        with self._lock:
            if not self.scheduler.has_work():
                self.stats = Stats()
            stats, first_preemptions = self.stats, self.scheduler.preemptions
        for _ in self._follow(seqs, progress, tokens=False):
            pass
        stats.wall_s = time.perf_counter() - started
        stats.preemptions = self.scheduler.preemptions - first_preemptions
        return [Output(s.prompt_ids, s.output_ids, self._decode(s.output_ids), s.finish_reason) for s in seqs]

    def _requests(self, prompts, params) -> list[Sequence]:
        """A sequence for every prompt, each checked (none is queued yet)."""
        prompts = checks.prompts(prompts)
        params = checks.instance("params", params or SamplingParams(), SamplingParams)
        return [Sequence(self._check_prompt(self._encode(p)), params) for p in prompts]

    def _follow(self, seqs: list[Sequence], progress=None, tokens: bool = True) -> Iterator[Token]:
        """Queue ``seqs`` and step until they finish (other threads' steps
        count too), yielding their new tokens when ``tokens``; whatever stops
        it early aborts them."""
        sent = [0] * len(seqs)  # tokens yielded, and their text, per sequence
        shown = [""] * len(seqs)
        try:
            with self._lock:
                for seq in seqs:
                    self.scheduler.add(seq)
            while True:
                with self._lock:
                    done = self.step() if any(s.status is not Status.FINISHED for s in seqs) else None
                    # what each sequence has now: another thread may step while this one yields
                    now = [(list(s.output_ids), s.finish_reason) for s in seqs] if tokens else None
                if done is not None and progress is not None:
                    progress(self, done)
                if tokens:
                    yield from self._new_tokens(now, sent, shown)
                if done is None:
                    return
        finally:
            self._drop(seqs)

    def _drop(self, seqs: list[Sequence]) -> None:
        """Abort what of ``seqs`` is unfinished. A stream the garbage collector
        closes may do this inside a step of this same thread (the lock lets it
        in): then it waits for the next step, never cutting into this one."""
        if self._stepping == threading.get_ident():
            self._dropped.append(seqs)
            return
        with self._lock:
            self._abort_unfinished(seqs)

    def _abort_unfinished(self, seqs: list[Sequence]) -> None:
        for seq in seqs:
            if seq.status is not Status.FINISHED:
                self.scheduler.abort(seq)

    def _new_tokens(self, now: list[tuple[list[int], str | None]], sent: list[int], shown: list[str]) -> Iterator[Token]:
        for i, (out, reason) in enumerate(now):
            while sent[i] < len(out):
                sent[i] += 1
                last = sent[i] == len(out) and reason is not None
                yield Token(i, out[sent[i] - 1], self._text_delta(out[:sent[i]], shown, i, last),
                            reason if last else None)

    def _text_delta(self, ids: list[int], shown: list[str], i: int, last: bool) -> str | None:
        """What ``ids``' last token adds to output ``i``'s text (``shown[i]``
        so far); a partial character waits for the token that completes it."""
        if self.tokenizer is None:
            return None
        text = self._decode(ids)
        if text.endswith("\ufffd") and not last:
            return ""
        delta, shown[i] = text[len(shown[i]):], text
        return delta

    @torch.inference_mode()
    def score(self, token_ids: list[int], prefix_len: int) -> torch.Tensor:
        """Teacher-forced logits [len(token_ids), vocab]: row i predicts token i+1.

        The first ``prefix_len`` tokens are prefilled in one step; the rest
        go one at a time through the decode path."""
        token_ids = self._check_prompt(token_ids)
        prefix_len = checks.integer("prefix_len", prefix_len, 0, len(token_ids))
        seq = Sequence(token_ids, SamplingParams())
        rows = []
        with self._lock, blamed(self._owners):
            try:
                chunks = ([prefix_len] if prefix_len else []) + [1] * (len(token_ids) - prefix_len)
                for n in chunks:
                    if not self.cache.can_allocate(seq, n):
                        raise UsageError("the cache cannot hold this sequence while others run; raise --cache-memory")
                    self.cache.allocate(seq, n)
                    rows.append(self._forward([(seq, n)], all_logits=True))
            except BaseException:
                self.cache.free(seq)
                self.scheduler.reclaim()  # whatever an interrupt left half done
                raise
            self.cache.free(seq)
        return torch.cat(rows).float()

    def _encode(self, prompt) -> list[int]:
        ids = checks.prompt_ids(prompt)
        return ids if ids is not None else encode_prompt(self.tokenizer, checks.utf8(prompt))

    def _decode(self, ids: list[int]) -> str | None:
        return None if self.tokenizer is None else self.tokenizer.decode(ids)


def _check_fits_memory(cache_memory: int, device: torch.device) -> None:
    """Refuse a CPU cache larger than the machine before trying to allocate it."""
    if device.type != "cpu":
        return
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return
    if cache_memory > total:
        raise UsageError(f"cache memory of {cache_memory / 2**30:.1f} GiB is more than this machine has "
                         f"({total / 2**30:.1f} GiB); lower --cache-memory")

