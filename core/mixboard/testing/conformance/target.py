"""A backend resolved for the kit: its class, its kind and that kind's adapter, the device it
runs on here and the state layout it keeps."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

import torch

from ...backend import ANY_DEVICE, Backend, declares_state_spec
from ...environment import Environment, detect, for_device, known_devices
from ...errors import UsageError, did_you_mean
from ...option_rules import for_backend
from ...registry import Registry, get_registry
from ...selection import reasons_against
from .kinds import KindAdapter, adapter_of
from .ops import OpAdapter
from .outcome import _backend


@dataclass(frozen=True)
class Target:
    """A backend resolved for the kit, with its kind's adapter."""

    cls: type
    kind: Any  # mixboard.Kind
    adapter: KindAdapter | OpAdapter
    options: Any = None  # the backend's OptionValues to build it with (None: its defaults)

    def with_options(self, given: Mapping[str, Any] | None) -> "Target":
        """This target built with ``given`` ({option: value}; the rest at their defaults), checked."""
        return dataclasses.replace(self, options=for_backend(self.cls, given))


def resolve(backend: str | type, registry: Registry | None = None, adapter: KindAdapter | OpAdapter | None = None
            ) -> Target:
    """A backend by name (looked up in ``registry``, default the installed
    one) or a Backend class given directly. ``adapter`` describes a kind a
    plugin defines (the built-in kinds have theirs)."""
    registry = registry or get_registry()
    if isinstance(backend, str):
        entry = registry.backends.get(backend)
        if entry is None:
            hint = did_you_mean(backend, registry.backends)
            installed = ", ".join(sorted(registry.backends)) or "none"
            raise UsageError(f"unknown backend {backend!r}{hint} (installed backends: {installed}; "
                             f"see `mixboard plugins` for plugins that failed to load)")
        cls = entry.cls
    elif isinstance(backend, type) and issubclass(backend, Backend):
        cls = backend
    else:
        raise UsageError(f"the kit takes a backend name or a mixboard.Backend subclass, not {backend!r}")
    kind = registry.kind(cls.kind)
    adapter = adapter or adapter_of(kind)
    if adapter is None:
        raise UsageError(f"backend {cls.name!r} serves kind {cls.kind!r}, which has no conformance adapter: the "
                         f"plugin that defines the kind describes it with mixboard.testing.conformance.KindAdapter (a "
                         f"dense kind: OpAdapter) and declares it on the Kind (conformance='module:NAME'); see "
                         f"docs/conformance.md")
    if adapter.kind != cls.kind:
        raise UsageError(f"backend {cls.name!r} serves {cls.kind}, not {adapter.kind}: use the {cls.kind} suite")
    return Target(cls, kind, adapter)


def default_device(cls: type) -> str:
    """This machine's device if the backend runs there, else the first device it declares."""
    here = detect().device
    return here if ANY_DEVICE in cls.devices or here in cls.devices else cls.devices[0]


def environment(target: Target, device: str | None) -> tuple[str, Environment | None, list[str]]:
    """(device, its environment, []) or (device, None, reasons every case is skipped).

    A malformed device is a UsageError; a device this machine lacks skips
    every case, with that and the backend's reasons against this machine."""
    cls = target.cls
    device = device or default_device(cls)
    known = known_devices()  # torch's and those plugins describe (out-of-tree devices)
    try:
        dev_type, present = torch.device(device).type, True
    except (RuntimeError, TypeError):  # torch lacks it here: a plugin's device whose extension is not loaded?
        dev_type, present = str(device).partition(":")[0], False
    if dev_type not in known:
        raise UsageError(f"unknown device {device!r}; expected a torch device: {', '.join(known)}, "
                         f"optionally with an index (cuda:1)")
    try:
        return device, for_device(device), []
    except UsageError as exc:
        if not present:  # reasons against this machine would only add "runs on acme; this is cpu"
            return device, None, [str(exc)]
        spec = target.kind.default_spec()
        if spec.dtype not in cls.dtypes:  # reasons that hold for every case, not the probe's dtype
            spec = dataclasses.replace(spec, dtype=cls.dtypes[0])
        return device, None, [str(exc), *reasons_against(cls, spec, detect())]


def state_spec(target: Target, spec: Any):
    """The backend's own state layout (its ``state_spec``, else the kind's canonical one)."""
    cls = target.cls
    if not declares_state_spec(cls):
        return target.kind.state_spec(spec)
    return _backend(cls.state_spec, spec)
