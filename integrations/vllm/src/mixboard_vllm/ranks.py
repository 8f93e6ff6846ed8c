"""Every rank must run the model the same way: plans compared over vLLM's gloo group.

Ranks of one pipeline stage hold the same layers and must plan them identically; each stage
holds other layers, so its plan is a part of the model's. Joined in stage order, the parts' rows
give the whole model's fingerprint (mixboard.plan.fingerprint_of), which every rank logs."""

from __future__ import annotations

from typing import NamedTuple

from mixboard.plan import fingerprint_of

from . import compat
from .errors import StartupError


class RankPlan(NamedTuple):
    """What each rank contributes to the gather."""
    rank: int
    stage: int
    fingerprint: str | None  # of this stage's part; None where the rank could not plan
    rows: list  # Plan.fingerprint_rows(): [name, kind, spec, backend, distribution, version(, options)] per layer
    failure: str | None  # why the rank could not plan


def _differences(a: list, b: list, limit: int = 3) -> str:
    diff = [f"{x[0]}: {x[3]} vs {y[3]}" for x, y in zip(a, b) if x != y]  # layer: backend vs backend
    if not diff:
        return "same backends, different plugin versions, specs or backend options"
    return "; ".join(diff[:limit]) + (f"; ... ({len(diff)} layers differ)" if len(diff) > limit else "")


def check_same_plan(rank: int, world: int, plan, failure: str | None = None) -> str | None:
    """All ranks plan at the same point of start-up (first KV-spec query), so the collective is safe.
    A rank that could not plan still takes part (``plan`` None, ``failure`` its reason), so that the
    others stop naming it instead of waiting; the failing rank raises its own error afterwards.
    Returns the whole model's fingerprint (None when this rank failed)."""
    if world <= 1:
        return None if plan is None else plan.fingerprint
    import torch.distributed as dist

    stage = compat.pipeline_stage()
    mine = (RankPlan(rank, stage, None, [], failure) if plan is None
            else RankPlan(rank, stage, plan.fingerprint, plan.fingerprint_rows(), None))
    gathered: list[RankPlan] = [None] * world
    dist.all_gather_object(gathered, mine, group=compat.world_cpu_group())
    if failure is not None:
        return None
    for other in gathered:
        if other.failure is not None:
            raise StartupError(f"mixboard-vllm: rank {other.rank} could not plan the model: "
                               f"{other.failure.removeprefix('mixboard-vllm: ')}")
    first_of_stage: dict[int, RankPlan] = {}
    for other in gathered:
        ref = first_of_stage.setdefault(other.stage, other)
        if other.fingerprint != ref.fingerprint:
            raise StartupError(
                f"mixboard-vllm: ranks planned the model differently: rank {ref.rank} fingerprint {ref.fingerprint}, "
                f"rank {other.rank} fingerprint {other.fingerprint} ({_differences(ref.rows, other.rows)}); install "
                "the same mixboard plugins and set the same MIXBOARD_* variables on every node")
    return fingerprint_of([row for stage in sorted(first_of_stage) for row in first_of_stage[stage].rows])
