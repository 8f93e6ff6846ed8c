"""Steps vLLM replays from full CUDA graphs: one recorded StepMeta per batch shape, refilled.

Where every planned backend may be captured for steps of decodes (``graphs.vllm_support``), vLLM
records one full graph per padded batch size of one-token requests and replays it for later such
steps. A replay runs the recorded kernels on the recorded tensors, so the metadata a recorded
forward read must be the object a later step's values are copied into: the builder keeps the
StepMeta it made while vLLM captured (``build_for_cudagraph_capture``) for each (tokens,
sequences), and for each later step of one-token rows and that shape it refills that object
(``mixboard.capture.refill``) and returns it, replayed or not.

Such steps are translated as decodes only (``batch.to_uniform_common``): vLLM's capture batches
have no context, its padded rows no tokens and PAD slots (-1); a padded row becomes a decode of
the null block (block 0, which vLLM reserves for padding), so no backend writes through -1. Only
attention layers are replayed: a plan with slot-state layers is told NEVER (graphs.py says why).
A step that cannot be refilled into its recording raises: replaying it would be silently wrong.

vLLM's CPU build captures no graph, so there this path never runs by itself.
``MIXBOARD_VLLM_RECORD_FIRST=1`` records the first step of each shape of one-token requests, as
vLLM records a graph, and runs every later one on that recording, as a replay reads it: the
recorded step's Python values and the new step's tensors. That is how the lane checks this path
in an engine on CPU (test_replay.py); it adds nothing a user needs.
"""

from __future__ import annotations

import os

from mixboard.capture import refill

from .batch import StepMeta, build_step

RECORD_FIRST = os.environ.get("MIXBOARD_VLLM_RECORD_FIRST") == "1"


def is_uniform(cm) -> bool:
    """A step of one-token requests (padding rows, of no tokens, allowed): what vLLM replays."""
    n, T = cm.num_reqs, cm.num_actual_tokens
    if T != n or cm.max_query_len > 1:
        return False
    qsl = cm.query_start_loc_cpu[: n + 1]
    return bool((qsl[1:] - qsl[:-1]).le(1).all())


class Recordings:
    """One builder's recorded steps, by (tokens, sequences)."""

    def __init__(self, groups, builders, enabled: bool):
        self.groups, self.builders = groups, builders
        self.enabled = enabled  # vLLM was told it may capture (graphs.vllm_support): else it never replays
        self.steps: dict[tuple[int, int], StepMeta] = {}

    def step(self, cm, translate, *, capture: bool) -> StepMeta | None:
        """The recorded StepMeta refilled with this step (recording it while vLLM captures), or None
        where vLLM runs this step eagerly: not a step of one-token rows (vLLM, told
        UNIFORM_SINGLE_TOKEN_DECODE, captures no other full graph), or of a shape never captured."""
        if not self.enabled or not (self.steps or capture or RECORD_FIRST) or not is_uniform(cm):
            return None  # on CPU nothing is ever recorded: one test a step
        key = (cm.num_actual_tokens, cm.num_reqs)
        recorded = self.steps.get(key)
        if recorded is None and not (capture or RECORD_FIRST):
            return None
        new = build_step(translate(cm, uniform=True, keep=recorded is None), self.groups, self.builders)
        if recorded is None:
            self.steps[key] = new
            return new
        problems = refill(recorded, new)
        if problems:
            raise RuntimeError(f"mixboard-vllm: a step of {key[1]} requests cannot be replayed from the CUDA graph "
                               f"recorded for that size: {'; '.join(problems[:3])} (a backend's builder output changed "
                               "form); set cudagraph_mode to PIECEWISE")
        return recorded
