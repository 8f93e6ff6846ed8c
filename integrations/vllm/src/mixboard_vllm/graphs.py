"""How far vLLM may capture mixboard's layers in CUDA graphs.

Each backend declares how far its forward may be captured (``Backend.capture``, checked by the
conformance kit: ``mixboard.capture``); ``planned_level`` is the weakest declaration among the
backends the process's plan runs, in either phase, and the plan's log line shows it.

vLLM is told NEVER whatever the backends declare (builder.py), so it runs mixboard's layers
eagerly between its graphs. Its full graphs do not yet fit mixboard's step contract, as vLLM 0.32
builds them (v1/worker/gpu_model_runner.py): the capture run's dummy decodes have no context (so
they are prefills to mixboard), a padded batch has requests of no tokens and PAD slots (-1) that
a backend would write through, and UNIFORM_SINGLE_TOKEN_DECODE also replays batches of one-token
fresh prompts, which mixboard's "uniform_decode" does not promise. Translating those is the
integration's work, to be done and verified on a GPU (docs/vllm.md, "CUDA and CUDA graphs").
"""

from __future__ import annotations

from mixboard.capture import NEVER, weakest


def planned_level(plan) -> str:
    """The weakest capture declaration of every backend ``plan`` runs (a mixboard Plan)."""
    backends = []
    for layer in plan.layers:
        backends.append(layer.selection.backend)
        if layer.decode_selection is not None:
            backends.append(layer.decode_selection.backend)
    return weakest(getattr(b, "capture", NEVER) for b in backends)
