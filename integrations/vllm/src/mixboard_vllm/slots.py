"""The vLLM metadata backend of slot-state layers (mamba1, mamba2, short_conv): vLLM builds one
builder per KV cache group, and it gives each request's state slot with the common metadata."""

from __future__ import annotations

from vllm.v1.attention.backend import AttentionBackend

from . import compat
from .batch import to_common
from .builder import GroupsBuilder


class MixboardSlotsBuilder(GroupsBuilder):
    def translate(self, cm, *, uniform: bool, keep: bool = False):
        # never uniform: a plan with slot-state layers is told NEVER (graphs.vllm_support), so vLLM replays none
        slots = compat.state_slots(cm, self.kv_cache_spec, self.vllm_config)
        return to_common(cm, 1, paged=False, slots=slots)


class MixboardSlotsBackend(AttentionBackend):
    @staticmethod
    def get_name() -> str:
        return "MAMBA2"  # only shown in vLLM's logs and errors

    @staticmethod
    def get_impl_cls():
        raise NotImplementedError("slot-state layers run inside the layer's own forward")

    @staticmethod
    def get_builder_cls():
        return MixboardSlotsBuilder

    @classmethod
    def is_ssm(cls) -> bool:
        return True
