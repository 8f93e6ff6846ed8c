"""How far vLLM may capture mixboard's layers in CUDA graphs, and keeping a captured step's
metadata in the tensors the graph reads.

Each backend declares how far its forward may be captured (``Backend.capture``, checked by the
conformance kit: ``mixboard.capture``). vLLM asks each metadata builder class once
(``get_cudagraph_support``); the answer is the weakest declaration among the backends the
process's plan runs, in either phase.

Not verified on a GPU yet (docs/vllm.md, "CUDA and CUDA graphs"): until it is, the declared level
reaches vLLM only with ``MIXBOARD_VLLM_CUDA_GRAPHS=1``, and every builder says ``never``
otherwise, so that vLLM runs mixboard's layers eagerly between its graphs. Where it does reach
vLLM, the builders keep one step's metadata per batch shape and copy each new step's values into
it (``Persistent``), as a replayed graph needs.
"""

from __future__ import annotations

import os
from typing import Any

from mixboard.capture import NEVER, refill, weakest

from .errors import StartupError

SWITCH = "MIXBOARD_VLLM_CUDA_GRAPHS"


def enabled() -> bool:
    return os.environ.get(SWITCH, "0") == "1"


def planned_level(plan) -> str:
    """The weakest capture declaration of every backend ``plan`` runs (a mixboard Plan)."""
    backends = []
    for layer in plan.layers:
        backends.append(layer.selection.backend)
        if layer.decode_selection is not None:
            backends.append(layer.decode_selection.backend)
    return weakest(getattr(b, "capture", NEVER) for b in backends)


def reported_level(plan) -> str:
    """What the builders tell vLLM: the planned level where the switch is on, else never."""
    return planned_level(plan) if enabled() else NEVER


class Persistent:
    """One recorded step metadata per batch shape (sequences, tokens): a new step's values are
    copied into it, so that a graph captured with it reads them. Only where graphs may be captured."""

    def __init__(self):
        self._recorded: dict[tuple[int, int], Any] = {}

    def __call__(self, step) -> Any:
        key = (step.common.num_seqs, step.common.num_tokens)
        recorded = self._recorded.setdefault(key, step)
        if recorded is step:
            return step
        problems = refill(recorded.metas, step.metas) + refill(recorded.common, step.common)
        if problems:
            raise StartupError(f"mixboard-vllm: a step's metadata cannot replace the one a CUDA graph was "
                               f"captured with ({'; '.join(problems[:3])}); unset {SWITCH}")
        return recorded
