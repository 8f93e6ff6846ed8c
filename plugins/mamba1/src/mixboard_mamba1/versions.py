"""Minimum versions of the kernel libraries mamba1_cuda relies on, and a
comparison that needs no third-party packaging module."""

from __future__ import annotations

import re

# causal_conv1d_update(..., conv_state_indices=) is in causal-conv1d 1.5.0 and later;
# selective_state_update(..., state_batch_indices=) is in mamba-ssm 2.3.0 and later.
MIN_VERSIONS = {"causal-conv1d": "1.5.0", "mamba-ssm": "2.3.0"}


def release(version: str) -> tuple[int, ...]:
    """The leading numeric release of a version string: '2.3.2.post1' -> (2, 3, 2)."""
    numbers = []
    for part in version.split("."):
        match = re.match(r"\d+", part)
        if not match:
            break
        numbers.append(int(match.group()))
        if match.end() != len(part):
            break
    return tuple(numbers)


def too_old(installed: str, minimum: str) -> bool:
    have, want = release(installed), release(minimum)
    width = max(len(have), len(want))
    return have + (0,) * (width - len(have)) < want + (0,) * (width - len(want))
