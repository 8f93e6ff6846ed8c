"""Every rank must run the model the same way: fingerprints compared over vLLM's gloo group."""

from __future__ import annotations

from . import compat
from .errors import StartupError


def _differences(a: list, b: list, limit: int = 3) -> str:
    diff = [f"{x[0]}: {x[1]} vs {y[1]}" for x, y in zip(a, b) if x != y]
    if not diff:
        return "same backends, different plugin versions or specs"
    return "; ".join(diff[:limit]) + (f"; ... ({len(diff)} layers differ)" if len(diff) > limit else "")


def check_same_plan(rank: int, world: int, plan) -> None:
    """All ranks plan at the same point of start-up (first KV-spec query), so the collective is safe."""
    if world <= 1:
        return
    import torch.distributed as dist

    mine = (rank, plan.fingerprint, [(lp.name, lp.backend) for lp in plan.layers])
    gathered: list = [None] * world
    dist.all_gather_object(gathered, mine, group=compat.world_cpu_group())
    ref = gathered[0]
    for other in gathered[1:]:
        if other[1] != ref[1]:
            raise StartupError(
                f"mixboard-vllm: ranks planned the model differently: rank {ref[0]} fingerprint {ref[1]}, "
                f"rank {other[0]} fingerprint {other[1]} ({_differences(ref[2], other[2])}); install the same "
                "mixboard plugins and set the same MIXBOARD_* variables on every node")
