"""The plan: every layer of a model resolved to a backend.

Per layer the chosen backend and why the others were not chosen; groups of
layers that share a backend and a state layout (the runner builds metadata
once per group and allocates one pool per group); a fingerprint that two
processes can compare to know they resolved the model the same way.
"""

from __future__ import annotations

import hashlib
import json
import math
from functools import cached_property
from typing import Any, Mapping

from .environment_facts import Environment
from .option_rules import with_options
from .options import OptionValues
from .selection import Selection
from .state import PAGED, StateSpec, shared_state


class LayerPlan:
    """One layer's choice: ``selection`` runs its rows, or, where ``decode_selection`` is set (a layer split
    by phase, ``mixboard.phases``), its prefill rows while ``decode_selection`` runs its decode rows."""

    __slots__ = ("name", "kind", "spec", "selection", "decode_selection")

    def __init__(self, name: str, kind: str, spec: Any, selection: Selection,
                 decode_selection: Selection | None = None):
        self.name = name
        self.kind = kind
        self.spec = spec
        self.selection = selection
        self.decode_selection = decode_selection

    @property
    def backend(self) -> str:
        """The backend of the layer's rows (of its prefill rows, in a layer split by phase)."""
        return self.selection.chosen.name

    @property
    def decode_backend(self) -> str:
        """The backend of the layer's decode rows."""
        return (self.decode_selection or self.selection).chosen.name

    @property
    def split(self) -> bool:
        return self.decode_selection is not None

    @property
    def rejected(self) -> Mapping[str, tuple[str, ...]]:
        return self.selection.rejected

    def to_dict(self) -> dict[str, Any]:
        out = {
            "name": self.name,
            "kind": self.kind,
            "backend": self.backend,
            "rule": self.selection.rule,
            "preferred_by": self.selection.preferred_by,
            "spec": self.spec.to_dict(),
            "rejected": {n: list(r) for n, r in self.rejected.items()},
        }
        if self.decode_selection is not None:
            d = self.decode_selection
            out["decode"] = {"backend": d.chosen.name, "rule": d.rule, "preferred_by": d.preferred_by,
                             "rejected": {n: list(r) for n, r in d.rejected.items()}}
        return out


class Group:
    """Layers that share a backend (one per phase, where split) and a state layout."""

    __slots__ = ("backend", "kind", "state_spec", "layers", "decode_backend")

    def __init__(self, backend: str, kind: str, state_spec: StateSpec, layers: tuple[str, ...],
                 decode_backend: str | None = None):
        self.backend, self.kind, self.state_spec, self.layers = backend, kind, state_spec, layers
        self.decode_backend = decode_backend  # None: ``backend`` runs the decode rows too

    def to_dict(self) -> dict[str, Any]:
        out = {"backend": self.backend, "kind": self.kind, "state": self.state_spec.to_dict(),
               "layers": list(self.layers)}
        if self.decode_backend is not None:
            out["decode_backend"] = self.decode_backend
        return out

    def __repr__(self) -> str:
        return f"Group({self.backend!r}, {len(self.layers)} layers)"


class Plan:
    def __init__(self, environment: Environment, layers: tuple[LayerPlan, ...],
                 options: Mapping[str, OptionValues] | None = None):
        self.environment = environment
        self.layers = layers
        self.options = dict(options or {})  # backend -> its option values, for the backends used that declare any
        # Layers that share a Selection share backend and state layout: key each distinct pair of
        # selections once (by identity), then group the layers in their order (cheap for 7,000 layers).
        key_of: dict[tuple[int, int], tuple] = {}
        groups: dict[tuple, tuple[str, list[str]]] = {}
        for layer in layers:
            selection, decode = layer.selection, layer.decode_selection
            ids = (id(selection), id(decode))
            key = key_of.get(ids)
            if key is None:
                state = selection.state_spec if decode is None else shared_state(selection.state_spec,
                                                                                 decode.state_spec)
                key = key_of[ids] = (selection.chosen.name, state, decode and decode.chosen.name)
                groups.setdefault(key, (selection.kind, []))
            groups[key][1].append(layer.name)
        self.groups = tuple(Group(b, kind, s, tuple(names), d) for (b, s, d), (kind, names) in groups.items())

    @property
    def block_multiple(self) -> int:
        """Paged pools share one block size: it must be a multiple of this (the lcm of every paged group's need)."""
        return math.lcm(1, *(g.state_spec.block_multiple for g in self.groups if g.state_spec.layout == PAGED))

    def __len__(self) -> int:
        return len(self.layers)

    def layer(self, name: str) -> LayerPlan:
        for layer in self.layers:
            if layer.name == name:
                return layer
        raise KeyError(name)

    def fingerprint_rows(self) -> list[list]:
        """What the fingerprint hashes, one row per layer: name, kind, spec, backend, and the
        distribution and version the backend came from (plain JSON values); a layer split by phase
        adds "decode" and its decode backend's three; then, where the layer's backends declare
        options, their values ({backend: {option: value}})."""
        rows = []
        spec_dicts: dict[int, dict] = {}  # models repeat one spec object layer after layer
        for layer in self.layers:
            entry = layer.selection.chosen
            spec = spec_dicts.get(id(layer.spec))
            if spec is None:
                spec = spec_dicts[id(layer.spec)] = layer.spec.to_dict()
            row = [layer.name, layer.kind, spec, entry.name, entry.distribution, entry.version]
            if layer.decode_selection is not None:  # a layer not split hashes as it always did
                d = layer.decode_selection.chosen
                row += ["decode", d.name, d.distribution, d.version]
            rows.append(row)
        return with_options(rows, self.options)

    @cached_property
    def fingerprint(self) -> str:
        """Stable across processes: layer names, kinds, specs, backends, the
        distribution and version each backend came from, and its option values."""
        return fingerprint_of(self.fingerprint_rows())

    @cached_property
    def mixer_fingerprint(self) -> str:
        """The fingerprint of the layers that keep state (the mixers) alone: what an engine that
        runs its own dense ops plans, and logs (vLLM), for the same layers."""
        rows = self.fingerprint_rows()
        return fingerprint_of([row for row, layer in zip(rows, self.layers) if layer.selection.state_spec.tensors])

    def to_dict(self) -> dict[str, Any]:
        return {
            "fingerprint": self.fingerprint,
            "mixer_fingerprint": self.mixer_fingerprint,
            "environment": self.environment.to_dict(),
            "layers": [layer.to_dict() for layer in self.layers],
            "groups": [group.to_dict() for group in self.groups],
            "options": {backend: dict(values) for backend, values in self.options.items()},
        }


def fingerprint_of(rows: list[list]) -> str:
    """The fingerprint of ``Plan.fingerprint_rows``; an engine that plans a model in parts
    (pipeline stages) joins the parts' rows in layer order and gets the whole model's."""
    blob = json.dumps(rows, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
