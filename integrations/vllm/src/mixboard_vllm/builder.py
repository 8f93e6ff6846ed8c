"""What every mixboard metadata builder inside vLLM shares: decodes first (mixboard's order), the
plan groups of the layers vLLM gave it, the groups' own builders, and what vLLM may capture in
full CUDA graphs: the weakest declaration of the planned backends (graphs.py), whose steps are
kept recorded and refilled (replay.py)."""

from __future__ import annotations

from typing import ClassVar

from vllm.v1.attention.backend import AttentionCGSupport, AttentionMetadataBuilder

from . import compat
from .batch import StepMeta, build_step
from .plan import process_plan
from .replay import Recordings


class GroupsBuilder(AttentionMetadataBuilder[StepMeta]):
    _cudagraph_support: ClassVar[AttentionCGSupport] = AttentionCGSupport.NEVER  # before a plan is made

    @classmethod
    def get_cudagraph_support(cls, vllm_config, kv_cache_spec) -> AttentionCGSupport:
        # vLLM's worker asks before it makes the builders (gpu_model_runner.py:6780), with the model
        # loaded, so the plan is made here if it is not yet
        return process_plan(vllm_config).cudagraph_support

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        compat.decodes_first(self)
        self.plan = process_plan(vllm_config)
        self.groups = sorted({self.plan.layer(n).group for n in layer_names})
        self.builders = self.plan.builders
        captured = self.plan.cudagraph_support is not AttentionCGSupport.NEVER
        self.recordings = Recordings(self.groups, self.builders, captured)

    def translate(self, cm, *, uniform: bool, keep: bool = False):
        """vLLM's CommonAttentionMetadata -> mixboard's CommonBatchMetadata (per subclass); uniform:
        a step vLLM may replay (batch.to_uniform_common), kept as the recording where ``keep``."""
        raise NotImplementedError

    def build(self, common_prefix_len: int, common_attn_metadata, fast_build: bool = False) -> StepMeta:
        return self._step(common_attn_metadata, capture=False)

    def build_for_cudagraph_capture(self, common_attn_metadata) -> StepMeta:
        return self._step(common_attn_metadata, capture=True)

    def _step(self, cm, *, capture: bool) -> StepMeta:
        """The step's recording, refilled (replay.py), where vLLM may replay it; else a StepMeta of its own."""
        recorded = self.recordings.step(cm, self.translate, capture=capture)
        if recorded is not None:
            return recorded
        return build_step(self.translate(cm, uniform=False), self.groups, self.builders)
