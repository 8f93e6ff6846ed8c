"""The per-process plan: which mixboard backend runs each of the model's mixer layers.

Made once per worker, on first need (the first layer asked for its state shape, or the first
metadata builder): the model is built by then and every layer is in vLLM's forward context.
Logged once as a table with its fingerprint; with several ranks the fingerprints must agree.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

from . import compat, graphs, ops, ranks, refused_settings, state, table
from .mixer import kind_and_spec, runs_on_mixboard
from .errors import StartupError

_PLAN: "ProcessPlan | None" = None
COMPILE_CACHE_MARKER = "on"  # vLLM's compile cache key gains it (compat.mark_compile_cache)


class Bound:
    """One layer's mixboard side: its plan row, its impl, and its group's index."""

    __slots__ = ("name", "kind", "spec", "backend", "impl", "group", "state_spec")

    def __init__(self, name, kind, spec, backend, impl, group, state_spec):
        self.name, self.kind, self.spec, self.backend = name, kind, spec, backend
        self.impl, self.group, self.state_spec = impl, group, state_spec


def on_layer_built(layer) -> None:
    """Called as each mixer layer is built (compat.on_mixer_layer_built), in every process that
    builds a model: refuse a layer mixboard would not run, and keep vLLM from reusing a model it
    compiled without mixboard (or with it, once it is off)."""
    refuse_foreign(layer)
    config = compat.current_vllm_config_or_none()
    if config is not None and not compat.mark_compile_cache(config, COMPILE_CACHE_MARKER):
        raise refused(StartupError(
            "mixboard-vllm: this platform's additional_config cannot carry mixboard's mark, so vLLM could load a "
            "model it compiled without mixboard; set VLLM_DISABLE_COMPILE_CACHE=1 or enforce_eager=True"))


def refuse_foreign(layer) -> None:
    """Called as each mixer layer is built (compat.on_mixer_layer_built): mixboard runs every one,
    or start-up fails here, naming the layer, before vLLM could run it quietly on its own."""
    if runs_on_mixboard(layer):
        return
    name, backend = compat.layer_name(layer), compat.attention_backend_name(layer)
    if backend is not None and type(layer).__name__ == "Attention":
        why = (f"got vLLM's own attention backend {backend}, not mixboard's: on CUDA or ROCm start vLLM with "
               "--attention-backend CUSTOM (mixboard's plan then chooses), or")
    else:
        why = f"is a {type(layer).__name__}, which mixboard-vllm does not take over:"
    raise refused(StartupError(f"mixboard-vllm: layer {name} {why} set MIXBOARD_VLLM=0 to let vLLM run this model"))


class ProcessPlan:
    def __init__(self, vllm_config):
        # Every rank reaches the fingerprint gather, having planned or not: a rank that raised
        # before it would leave the others waiting there until gloo's timeout.
        self.rank, self.world = compat.rank_world()
        try:
            self._make(vllm_config)
        except StartupError as exc:
            ranks.check_same_plan(self.rank, self.world, None, str(exc))
            raise
        self.model_fingerprint = ranks.check_same_plan(self.rank, self.world, self.plan)
        if self.world > 1:
            if self.model_fingerprint == self.plan.fingerprint:
                init_log().info("mixboard-vllm: all %d ranks share fingerprint %s", self.world, self.plan.fingerprint)
            else:  # pipeline stages: each planned its part
                init_log().info("mixboard-vllm: all %d ranks agree; the whole model's fingerprint is %s (this "
                                "stage's part: %s)", self.world, self.model_fingerprint, self.plan.fingerprint)

    def _make(self, vllm_config):
        from mixboard import get_registry
        from mixboard.environment import for_device
        from mixboard.errors import MixboardError
        from mixboard.ops.phase_split import SplitImpl, split_builder

        from . import strict

        t0 = time.perf_counter()
        try:
            registry = get_registry()
        except MixboardError as exc:  # MIXBOARD_STRICT_PLUGINS with a faulty plugin, among others
            raise StartupError(f"mixboard-vllm: {exc}") from None
        if registry.faults and strict():
            raise StartupError("mixboard-vllm: plugin faults (MIXBOARD_STRICT_PLUGINS is set): "
                               + "; ".join(registry.faults))
        self.env = for_device(str(vllm_config.device_config.device))
        layers, foreign = [], []
        for name, layer in compat.mixer_layers(vllm_config):
            found = kind_and_spec(name, layer)
            if found is None:
                foreign.append(f"{name} ({type(layer).__name__})")
            else:
                layers.append((name, *found))
        # the experts vLLM's build cannot run (layers/moe.py): dense, stateless, planned beside the mixers
        layers += [(name, experts.mixboard_kind, experts.mixboard_spec())
                   for name, experts in compat.taken_over_experts(vllm_config)]
        for name, cls, refusal in compat.unclaimed_experts(vllm_config):
            raise StartupError(f"mixboard-vllm: layer {name}: vLLM refuses these experts here ({refusal}), and "
                               f"mixboard takes over vLLM's RoutedExperts only, not this model's {cls}; run this "
                               "model where vLLM's own experts run it (CUDA, ROCm, XPU)")
        if foreign:
            raise StartupError(
                f"mixboard-vllm: vLLM would run {len(foreign)} mixer layer(s) itself, not through mixboard: "
                f"{', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}; mixboard-vllm does not take them over, "
                "or (on CUDA) vLLM was not started with --attention-backend CUSTOM; set MIXBOARD_VLLM=0 "
                "to let vLLM run the whole model")
        try:
            self.plan = _planned(registry, layers, self.env,
                                 getattr(vllm_config.model_config.hf_config, "model_type", None))
        except MixboardError as exc:
            raise StartupError(f"mixboard-vllm: {exc}") from None
        self.cudagraph_support = graphs.vllm_support(self.plan)  # what every builder tells vLLM (builder.py)
        state.check_paged_layout(self.plan)
        ops.check_graph_splits(vllm_config, {lp.kind for lp in self.plan.layers})
        state.check_hybrid(self.plan)
        refused_settings.check_settings(vllm_config, self.plan)
        self.builders: list[Any] = []
        self.bound: dict[str, Bound] = {}
        for gid, group in enumerate(self.plan.groups):
            first = self.plan.layer(group.layers[0])
            build = self._builder(first.selection, first.spec)
            if first.split:  # each phase's rows through its own backend (mixboard.phases)
                build = split_builder(build, self._builder(first.decode_selection, first.spec))
            self.builders.append(build)
            for lname in group.layers:
                lp = self.plan.layer(lname)
                impl = self._impl(lp.selection, lp)
                if lp.split:
                    impl = SplitImpl(impl, self._impl(lp.decode_selection, lp), registry.kind(lp.kind).row_inputs)
                self.bound[lname] = Bound(lname, lp.kind, lp.spec, lp.backend, impl, gid, group.state_spec)
        told = self.cudagraph_support.name
        if not compat.captures_cuda_graphs(vllm_config):
            told += ", though this configuration captures no graphs (cudagraph_mode NONE)"
        init_log().info("mixboard-vllm plan, rank %d of %d, %s, fingerprint %s (%d layers, %d groups, %.0f ms; the "
                        "backends may be captured: %s, vLLM is told %s):\n%s",
                        self.rank, self.world, self.env, self.plan.fingerprint, len(self.plan.layers),
                        len(self.plan.groups), (time.perf_counter() - t0) * 1e3, graphs.planned_level(self.plan),
                        told, table.render(self.plan))

    def _builder(self, selection, spec):
        """A backend's builder, with the plan's values of its options (build_builder)."""
        from mixboard.ops.checks import build_builder

        return build_builder(selection.backend, spec, self.env, self.plan.options.get(selection.chosen.name))

    def _impl(self, selection, layer):
        from mixboard.ops.checks import build_impl

        options = self.plan.options.get(selection.chosen.name)
        return build_impl(selection.backend, layer.spec, self.env, layer.name, options)

    def layer(self, name: str) -> Bound:
        try:
            return self.bound[name]
        except KeyError:
            raise StartupError(f"mixboard-vllm: layer {name!r} is not in this process's plan") from None


def _planned(registry, layers, env, model_type=None):
    """The mixers' plan: by the rules, or exactly a lock's ($MIXBOARD_LOCK, `mixboard lock`), whose
    layers are matched to vLLM's by name, else by kind and block (``_lock_names``); the lock's dense
    ops are vLLM's own here (but for experts taken over, layers/moe.py)."""
    backend, prefer = os.environ.get("MIXBOARD_BACKEND") or None, os.environ.get("MIXBOARD_PREFER") or None
    options = os.environ.get("MIXBOARD_BACKEND_OPTIONS") or None
    path = os.environ.get("MIXBOARD_LOCK") or None
    if path is None:
        return registry.plan(layers, env, backend, prefer, options)
    from mixboard.errors import UsageError
    from mixboard.lock import Lock

    if backend or prefer or options:
        raise UsageError("MIXBOARD_LOCK fixes every layer's backends and their options: unset MIXBOARD_BACKEND, "
                         "MIXBOARD_PREFER and MIXBOARD_BACKEND_OPTIONS")
    lock = Lock.read(path)
    rename = _lock_names(lock, layers).get

    lock.refuse(lock.differences(registry, env, layers, rename, partial=True, model_type=model_type))
    with lock.blamed():
        plan = registry.plan(layers, env, lock.rules(rename), options=lock.options_for(layers, rename))
    lock.refuse(lock.check_plan(plan, fingerprint=False, partial=True))
    return plan


def _lock_names(lock, layers) -> dict[str, str]:
    """vLLM's layer name -> the lock's. Engines name a block's mixer differently (the runner's
    ``model.layers.1.self_attn`` is vLLM's ``model.layers.1.self_attn.attn``, LFM2's ``...0.conv`` its
    ``...0.short_conv``), so a layer not in the lock by name is matched by its kind and block number
    (the first number in its name): each block has one mixer of a kind. vLLM numbers some layers
    its own way (Falcon-H1's Mamba-2 of block i is its ``model.{L+i}.mixer``, L blocks): a kind's
    layers still unmatched then pair with the lock's unclaimed ones in block order, where both sides
    hold as many. Unmatched names stay as they are, and the lock then says it does not know them."""
    by_block: dict[tuple[str, str], list[str]] = {}
    for name, (kind, _, _) in lock.choices.items():
        by_block.setdefault((kind, _block(name)), []).append(name)
    names = {}
    for name, kind, _ in layers:
        found = by_block.get((kind, _block(name)), [])
        names[name] = name if name in lock.choices or len(found) != 1 else found[0]
    claimed = set(names.values())
    for kind in {kind for _, kind, _ in layers}:
        ours = [n for n, k, _ in layers if k == kind and names[n] not in lock.choices]
        theirs = [n for n, (k, _, _) in lock.choices.items() if k == kind and n not in claimed]
        if ours and len(ours) == len(theirs):
            names.update(zip(sorted(ours, key=_block_number), sorted(theirs, key=_block_number)))
    return names


def _block(name: str) -> str:
    number = re.search(r"\.(\d+)\.", name + ".")
    return number.group(1) if number else ""


def _block_number(name: str) -> int:
    return int(_block(name) or -1)


def init_log():
    from vllm.logger import init_logger

    return init_logger("vllm.mixboard")


def refused(exc: StartupError) -> StartupError:
    """Log the reason as one line of its own before vLLM wraps it in worker tracebacks (it reaches
    the user's process too, as "Worker failed with error '...'")."""
    init_log().error("start-up refused: %s", exc)
    return exc


def process_plan(vllm_config=None) -> ProcessPlan:
    global _PLAN
    if _PLAN is None:
        try:
            _PLAN = ProcessPlan(vllm_config if vllm_config is not None else compat.current_vllm_config())
        except StartupError as exc:
            raise refused(exc) from None
    return _PLAN
