"""The capture cases: a backend's ``capture`` declaration (mixboard.capture), checked.

``capture_decode`` (for a backend that declares ``uniform_decode`` or
``any``) runs prompts, then steps of three decodes; ``capture_mixed`` (for
``any``) steps of 9 tokens over 4 sequences, decodes, continued prefills and
fresh prompts in another mix each time (``schedules.py``). A step the
declaration covers (every sequence a decode, for ``uniform_decode``; any
step, for ``any``) is run as an engine that captures graphs runs it:

* **no host sync**: its forward runs under ``host_syncs.watch()``; a call
  that reads a tensor on the host (``.item()``, ``.tolist()``, ``int(t)``),
  makes an output sized by the data (``nonzero``, boolean indexing) or
  copies between devices fails the case, naming the call. The builder is
  not watched: it runs outside the graph, every step.
* **replay**: the first step of each shape (as many sequences of decodes;
  for ``any``, as many tokens and sequences) is recorded: the builder's
  output for it is kept. Every later step of that shape is replayed: the
  builder's output for it is copied into the recorded one
  (``mixboard.capture.refill``, which fails the case if shapes differ) and
  the forward runs on the recorded one. Its output must be the oracle's for
  the new step, and no record outside the new step's sequences may change.
  A forward that read the recorded step's ints or tuples (``max_seq_len``,
  ``num_decodes``, ``block_range``, a plan of Python values) or kept
  something from it (a memo, a value derived on first use) computes the
  recorded step again, and fails here: the replayed steps differ from the
  recorded one in context lengths, slots (consecutive when recorded,
  scattered after), blocks, block range, the longest sequence and, in
  ``capture_mixed``, the number of decodes and the prefills' lengths.

Block tables keep one width through a case, as an engine's persistent
table does, so that a replay is possible at all.

What a CPU run cannot show: a copy between devices (there is one device),
a kernel that reads host memory the graph would not refresh, and whatever
a kernel called through ctypes or an extension does inside (opaque to
torch; the replay check still sees its results). A GPU backend's
declaration is checked only where its device is.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from ...capture import ANY, NEVER, UNIFORM_DECODE, refill, weakest
from ...dtypes import torch_dtype
from ...metadata import CommonBatchMetadata
from ...ops.checks import build_builder
from .cases import CONTIGUOUS, Case
from .host_syncs import summary, watch
from .inputs import draw_inputs, place
from .isolation import changed_foreign_record, owned_records
from .mixer_case import Step, _compare, _layers, block_size_for, case_steps
from .outcome import _backend, _Failure, _Worst
from .target import Target, state_spec

_SHAPES = {UNIFORM_DECODE: "step of decodes of as many sequences", ANY: "step of as many tokens and sequences"}


def declared_skip(backend: type, case: Case) -> str | None:
    """Why ``case`` is skipped for ``backend``'s declaration, or None when the declaration covers it."""
    level = getattr(backend, "capture", NEVER)
    if weakest((level, case.capture)) == case.capture:
        return None
    if level == NEVER:
        return ("declares capture='never' (the default): its forward runs eagerly every step, never replayed from "
                "a graph")
    return f"declares capture={level!r}: only steps of decodes are replayed, not mixed ones"


def shape_of(level: str, common: CommonBatchMetadata) -> tuple | None:
    """The shape a graph of ``level`` is recorded for, or None for a step it does not cover (run eagerly)."""
    if level == UNIFORM_DECODE:
        return (common.num_seqs,) if common.num_decodes == common.num_seqs else None
    return (common.num_tokens, common.num_seqs)


def execute_capture(target: Target, case: Case, env: Any, device: str, tol: float, worst: _Worst) -> None:
    # Outside inference mode: inside it torch hands the watch composite ops whole (host_syncs.py).
    with torch.no_grad():
        _Replay(target, case, env, device, tol, worst).run()


class _Replay:
    def __init__(self, target: Target, case: Case, env: Any, device: str, tol: float, worst: _Worst):
        self.target, self.case, self.device, self.tol, self.worst = target, case, device, tol, worst
        spec = case.spec
        own = state_spec(target, spec)
        self.layout, self.bs = own.layout, block_size_for(case, own)
        self.gen = torch.Generator().manual_seed(case.seed)
        (self.layer,) = _layers(target, case, env, device, self.gen, self.bs)
        self.builder = _backend(build_builder, target.cls, spec, env, target.options)
        self.width = max(len(s.blocks) for s in case.seqs)  # the table's columns, in every step
        self.declared = f"declares capture={target.cls.capture!r}"
        self.recordings: dict[tuple, tuple[int, Any]] = {}  # shape -> (step number, its builder output)

    def run(self) -> None:
        for step in case_steps(self.case, self.bs):
            self._step(step)

    def _step(self, step: Step) -> None:
        case, bs, layer, adapter = self.case, self.bs, self.layer, self.target.adapter
        number, order, query, context, slots = step.number, step.order, step.query, step.context, step.slots
        padded = [list(t) + [case.pad_block] * (self.width - len(t)) for t in step.tables]
        common = CommonBatchMetadata.build(query, context, slots, padded, bs, self.device, case.pad_block)
        common_cpu = CommonBatchMetadata.build(query, context, slots, padded, bs, "cpu", case.pad_block)
        where = f"step {number} of {len(case.steps)}"
        shape = shape_of(case.capture, common)
        meta = _backend(self.builder, common)
        replayed = shape in self.recordings
        if replayed:
            first, recorded = self.recordings[shape]
            problems = refill(recorded, meta)
            if problems:
                raise _Failure(f"{where}: {self.declared}, but its builder's output for this step cannot be copied "
                               f"into the one recorded at step {first}: {'; '.join(problems[:3])}; a graph replays the "
                               f"recorded tensors, so for every {_SHAPES[case.capture]} they must keep their shapes")
            meta, where = recorded, f"{where}, replayed from step {first}'s recording"
        elif shape is not None:
            self.recordings[shape] = (number, meta)
        inputs = draw_inputs(adapter.inputs(case.spec), sum(query), torch_dtype(case.spec.dtype), self.gen)
        before = {k: v.clone() for k, v in layer.state.items()}
        with (watch() if shape is not None else contextlib.nullcontext([])) as found:
            out = _backend(adapter.call, layer.impl, place(inputs, self.device, CONTIGUOUS), layer.weights,
                           layer.state, meta)
        if found:
            raise _Failure(f"{where}: {self.declared}, but its forward calls {summary(found)}; a replayed graph runs "
                           f"no Python and reads no new sizes: decide in the builder, into tensors")
        ref = adapter.call(layer.oracle, inputs, layer.oracle_weights, layer.oracle_state, common_cpu)
        try:
            _compare(out, ref, self.device, order, context, where, self.tol, self.worst)
            moved = changed_foreign_record(self.layout, before, layer.state,
                                           owned_records(self.layout, zip(slots, step.tables)))
            if moved:
                raise _Failure(f"{where}: {moved}")
        except _Failure as exc:
            if not replayed:
                raise
            raise _Failure(f"{exc}; {self.declared}, but on the recorded step's metadata, refilled, its forward "
                           f"computes something else: it reads more than that metadata's tensors (an int or tuple "
                           f"of it, such as max_seq_len, num_decodes or block_range, or something kept from the "
                           f"recorded step)") from None
