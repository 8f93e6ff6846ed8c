"""A layer split by phase (``mixboard.phases``): its decode rows through one
backend's impl, its prefill rows through another's, one state between them.

A step's decodes come first, so the split is a cut at row ``num_decodes``
of every per-row input (the kind's ``row_inputs``); the two results are
joined again along the rows. A step of one phase calls that phase's impl
alone, with its inputs as they are. An engine builds, for a layer that
keeps state, one ``split_builder`` per pair of builders, so each backend's
builder sees only its own phase's sequences (``CommonBatchMetadata.phase_parts``).
"""

from __future__ import annotations

from typing import Any, Callable

import torch


class PhaseMeta:
    """What a stateful layer split by phase gets as ``meta``: the step's decode count, then each
    phase's meta from its own backend's builder (None where the step has no row of that phase)."""

    __slots__ = ("num_decodes", "prefill", "decode")

    def __init__(self, num_decodes: int, prefill: Any, decode: Any):
        self.num_decodes, self.prefill, self.decode = num_decodes, prefill, decode


def split_builder(prefill_builder: Callable, decode_builder: Callable) -> Callable:
    """One builder for a group of layers split by phase: each phase's builder on its part of the step."""
    def build(common):
        decodes, prefills = common.phase_parts
        return PhaseMeta(common.num_decodes, prefills and prefill_builder(prefills),
                         decodes and decode_builder(decodes))
    return build


class StepRows:
    """The current step's decode-row count, which an engine sets before each forward: what a
    stateless op split by phase reads (it gets no step metadata)."""

    __slots__ = ("num_decodes",)

    def __init__(self):
        self.num_decodes = 0


class SplitImpl:
    """Has each entry point of the kind (``row_inputs``: name -> how many leading arguments are
    per-row). Stateful: the last argument is a ``PhaseMeta``. Stateless: ``rows`` says the step's
    decode count."""

    def __init__(self, prefill: Any, decode: Any, row_inputs: dict[str, int], rows: StepRows | None = None):
        self.prefill, self.decode, self.rows = prefill, decode, rows
        self.layer_name = getattr(prefill, "layer_name", "(unnamed layer)")
        for entry, count in row_inputs.items():
            setattr(self, entry, self._entry(entry, count))

    def _entry(self, entry: str, count: int) -> Callable:
        run_prefill, run_decode = getattr(self.prefill, entry), getattr(self.decode, entry)
        rows = self.rows

        def run(*args):
            if rows is None:  # stateful: the meta is last
                meta, args = args[-1], args[:-1]
                n, prefill_tail, decode_tail = meta.num_decodes, (meta.prefill,), (meta.decode,)
            else:
                n, prefill_tail, decode_tail = rows.num_decodes, (), ()
            total = args[0].shape[0]
            if n == 0:
                return run_prefill(*args, *prefill_tail)
            if n >= total:
                return run_decode(*args, *decode_tail)
            head = tuple(_rows(a, 0, n) if i < count else a for i, a in enumerate(args))
            tail = tuple(_rows(a, n, total) if i < count else a for i, a in enumerate(args))
            return _joined(run_decode(*head, *decode_tail), run_prefill(*tail, *prefill_tail))

        run.__name__ = entry
        return run


def _rows(value, start: int, end: int):
    return None if value is None else value[start:end]


def _joined(first, second):
    if isinstance(first, tuple):
        return tuple(_joined(a, b) for a, b in zip(first, second))
    return torch.cat((first, second))
