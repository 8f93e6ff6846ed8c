"""How far vLLM may capture mixboard's layers in CUDA graphs.

Each backend declares how far its forward may be captured (``Backend.capture``, checked by the
conformance kit: ``mixboard.capture``); ``planned_level`` is the weakest declaration among the
backends the process's plan runs, in either phase, and the plan's log line shows it.

vLLM is told what it may capture (``vllm_support``): UNIFORM_SINGLE_TOKEN_DECODE where every
planned backend may be replayed for steps of decodes (``uniform_decode`` or ``any``) and no
planned layer keeps its state in slots; NEVER otherwise. Told the first, vLLM records full graphs
of one-token batches and runs other batches between its piecewise graphs, mixboard's layers
eagerly. vLLM 0.32's full graphs do not fit mixboard's step contract as they come
(v1/worker/gpu_model_runner.py): the capture run's requests have no context (prefills, to
mixboard), a padded batch has requests of no tokens and PAD slots (-1) that a backend would write
through, and a batch of one-token requests may hold a fresh prompt of one token. replay.py and
batch.to_uniform_common translate them into decodes, which is exact for attention: a prompt of
one token attends to itself alone. A slot-state layer's decode would read a record the fresh
prompt must not inherit, and resetting it inside a replay is not done, so a plan with one is told
NEVER. Mixed batches are not translated either, so ``any`` is told as uniform decodes. Verified
on CPU against vLLM's own metadata (test_replay.py); no GPU has run it (docs/vllm.md, "CUDA and
CUDA graphs").
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


def vllm_support(plan):
    """What vLLM is told (an AttentionCGSupport) for a plan: see the module's docstring."""
    from vllm.v1.attention.backend import AttentionCGSupport

    from mixboard.state import SLOTS

    if planned_level(plan) == NEVER or any(g.state_spec.layout == SLOTS for g in plan.groups):
        return AttentionCGSupport.NEVER
    return AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE
