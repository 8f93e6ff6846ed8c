"""What every mixboard metadata builder inside vLLM shares: decodes first (mixboard's order), the
plan groups of the layers vLLM gave it, and the groups' own builders. vLLM captures none of them
in CUDA graphs (``NEVER``): graphs.py says why."""

from __future__ import annotations

from typing import ClassVar

from vllm.v1.attention.backend import AttentionCGSupport, AttentionMetadataBuilder

from . import compat
from .batch import StepMeta
from .plan import process_plan


class GroupsBuilder(AttentionMetadataBuilder[StepMeta]):
    _cudagraph_support: ClassVar[AttentionCGSupport] = AttentionCGSupport.NEVER

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        compat.decodes_first(self)
        self.plan = process_plan(vllm_config)
        self.groups = sorted({self.plan.layer(n).group for n in layer_names})
        self.builders = self.plan.builders
