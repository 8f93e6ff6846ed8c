"""Every rank must run the model the same way: fingerprints compared over vLLM's gloo group."""

from __future__ import annotations

from . import compat
from .errors import StartupError


def _differences(a: list, b: list, limit: int = 3) -> str:
    diff = [f"{x[0]}: {x[1]} vs {y[1]}" for x, y in zip(a, b) if x != y]
    if not diff:
        return "same backends, different plugin versions or specs"
    return "; ".join(diff[:limit]) + (f"; ... ({len(diff)} layers differ)" if len(diff) > limit else "")


def check_same_plan(rank: int, world: int, plan, failure: str | None = None) -> None:
    """All ranks plan at the same point of start-up (first KV-spec query), so the collective is safe.
    A rank that could not plan still takes part (``plan`` None, ``failure`` its reason), so that the
    others stop naming it instead of waiting; the failing rank raises its own error afterwards."""
    if world <= 1:
        return
    import torch.distributed as dist

    mine = (rank, None, [], failure) if plan is None else (
        rank, plan.fingerprint, [(lp.name, lp.backend) for lp in plan.layers], None)
    gathered: list = [None] * world
    dist.all_gather_object(gathered, mine, group=compat.world_cpu_group())
    if failure is not None:
        return
    for other in gathered:
        if other[3] is not None:
            raise StartupError(f"mixboard-vllm: rank {other[0]} could not plan the model: {other[3]}")
    ref = gathered[0]
    for other in gathered[1:]:
        if other[1] != ref[1]:
            raise StartupError(
                f"mixboard-vllm: ranks planned the model differently: rank {ref[0]} fingerprint {ref[1]}, "
                f"rank {other[0]} fingerprint {other[1]} ({_differences(ref[2], other[2])}); install the same "
                "mixboard plugins and set the same MIXBOARD_* variables on every node")
