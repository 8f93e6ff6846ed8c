"""Serves attention (sdpa's code under another name, first in priority) only in the process whose
torch.distributed rank is $MIXBOARD_VLLM_TEST_SKEW_RANK: a node where one plugin is installed and
the others lack it. Inert without that variable."""

import os

from mixboard import hookimpl
from mixboard_sdpa.backend import SdpaAttention


class SkewSdpa(SdpaAttention):
    declaration = SdpaAttention.declaration(name="skew_sdpa", priority=100)  # sdpa's, renamed, first in priority


def _rank() -> int | None:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else None


@hookimpl
def mixboard_backends():
    want = os.environ.get("MIXBOARD_VLLM_TEST_SKEW_RANK")
    return [SkewSdpa] if want is not None and str(_rank()) == want else []
