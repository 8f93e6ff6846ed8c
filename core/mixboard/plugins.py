"""Plugin loading: the one module that owns the plugin manager.

Entry points of the group ``mixboard`` are scanned once per process and
loaded one by one, so that a broken plugin is recorded with its cause and
left out while the others keep working. Faults recorded:

* the module fails to import, or names a hook that does not exist;
* a hook raises, or returns something that is not a list;
* an item is not a Backend subclass, lacks a declaration, targets an API
  version this mixboard does not support, names a kind nobody defines, or
  declares malformed ``options`` (mixboard.options) or an unknown ``capture``
  level (mixboard.capture);
* an item of ``mixboard_devices()`` is not a valid ``mixboard.Device`` or
  names one of torch's own device types;
* two plugins register the same backend (kind, device) name: both are left
  out and both distributions named.

Environment variables (entry-point names, comma separated):
``MIXBOARD_PLUGINS`` loads only those, ``MIXBOARD_DISABLE_PLUGINS`` skips
those, ``MIXBOARD_STRICT_PLUGINS=1`` turns any fault into a PluginError.
"""

from __future__ import annotations

import difflib
import os
from importlib import metadata
from typing import Any, Iterable

import pluggy

from . import hookspecs
from .backend import REQUIRED_DECLARATIONS, SUPPORTED_API_VERSIONS, Backend
from .capture import capture_problem
from .devices import Device, device_problem
from .errors import PluginError
from .kinds import BUILTIN_KINDS, Kind, MixerSpec
from .options import declaration_problem

GROUP = "mixboard"
HOOK_NAMES = ("mixboard_backends", "mixboard_kinds", "mixboard_devices")


# Plain classes, not dataclasses: these modules load in every process that
# plans, and each dataclass costs about a millisecond to create at import.
class PluginRecord:
    """What ``mixboard plugins`` shows for one entry point."""

    __slots__ = ("name", "distribution", "version", "status", "errors", "backends", "kinds", "devices")

    def __init__(self, name: str, distribution: str | None = None, version: str | None = None, status: str = "ok"):
        self.name, self.distribution, self.version = name, distribution, version
        self.status = status  # "ok" | "error" | "disabled"
        self.errors: list[str] = []
        self.backends: list[str] = []
        self.kinds: list[str] = []
        self.devices: dict[str, Device] = {}  # by name; iterating gives the names

    def fault(self, cause: str) -> None:
        self.status = "error"
        self.errors.append(cause)

    def where(self) -> str:
        if self.distribution:
            return f"plugin {self.name!r} ({self.distribution} {self.version})"
        return f"plugin {self.name!r}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "status": self.status,
            "error": "; ".join(self.errors) or None,
            "backends": list(self.backends),
            "kinds": list(self.kinds),
            "devices": [device.to_dict() for device in self.devices.values()],
        }

    def __repr__(self) -> str:
        return f"PluginRecord({self.name!r}, {self.distribution!r}, {self.version!r}, {self.status!r})"


class BackendEntry:
    """A registered backend and where it came from."""

    __slots__ = ("cls", "plugin", "distribution", "version")

    def __init__(self, cls: type, plugin: str, distribution: str | None, version: str | None):
        self.cls, self.plugin, self.distribution, self.version = cls, plugin, distribution, version

    @property
    def name(self) -> str:
        return self.cls.name

    def __repr__(self) -> str:
        return f"BackendEntry({self.name!r} from {self.distribution or self.plugin})"


class Loaded:
    __slots__ = ("kinds", "backends", "plugins", "devices")

    def __init__(self, kinds: dict[str, Kind], backends: dict[str, BackendEntry], plugins: list[PluginRecord],
                 devices: dict[str, Device] | None = None):
        self.kinds, self.backends, self.plugins = kinds, backends, plugins
        self.devices = devices if devices is not None else {}

    @property
    def faults(self) -> list[str]:
        return [f"{p.where()}: {e}" for p in self.plugins for e in p.errors]


def _env_names(var: str) -> set[str] | None:
    value = os.environ.get(var)
    if value is None:
        return None
    return {n.strip() for n in value.split(",") if n.strip()}


def load(entry_points: Iterable[metadata.EntryPoint] | None = None) -> Loaded:
    """Load every plugin; never raises for a plugin's fault unless strict."""
    if entry_points is None:
        entry_points = metadata.entry_points(group=GROUP)
    found = sorted(((ep, *_distribution(ep)) for ep in entry_points), key=lambda f: (f[0].name, f[1] or ""))

    allow = _env_names("MIXBOARD_PLUGINS")
    deny = _env_names("MIXBOARD_DISABLE_PLUGINS") or set()
    pm = pluggy.PluginManager(GROUP)
    pm.add_hookspecs(hookspecs)

    records: dict[str, PluginRecord] = {}
    plugin_list: list[PluginRecord] = []
    for ep, dist_name, dist_version in found:
        record = PluginRecord(ep.name, dist_name, dist_version)
        plugin_list.append(record)
        if ep.name in records:
            first = records[ep.name]
            record.fault(f"entry point name {ep.name!r} is also used by {first.distribution}; rename one of them")
            continue
        records[ep.name] = record
        if (allow is not None and ep.name not in allow) or ep.name in deny:
            record.status = "disabled"
            continue
        _register(pm, ep, record)

    for var, names in (("MIXBOARD_PLUGINS", allow or set()), ("MIXBOARD_DISABLE_PLUGINS", deny)):
        for unknown in sorted(names - set(records)):
            known = ", ".join(sorted(records)) or "none"
            bad = PluginRecord(unknown, status="error")
            bad.fault(f"{var} names {unknown!r}, but no plugin of that name is installed (installed: {known})")
            plugin_list.append(bad)

    kinds = _collect_kinds(pm, records)
    backends = _collect_backends(pm, records, kinds)
    loaded = Loaded(kinds, backends, plugin_list, _collect_devices(pm, records))
    if os.environ.get("MIXBOARD_STRICT_PLUGINS", "") not in ("", "0") and loaded.faults:
        raise PluginError("plugin faults (MIXBOARD_STRICT_PLUGINS is set):\n  " + "\n  ".join(loaded.faults))
    return loaded


_LOADED: Loaded | None = None


def loaded() -> Loaded:
    """The installed plugins, scanned and loaded once per process: what ``get_registry()`` holds,
    and where ``mixboard.environment`` finds the devices plugins describe."""
    global _LOADED
    if _LOADED is None:
        _LOADED = load()
    return _LOADED


def forget_loaded() -> None:
    """Scan again on the next ``loaded()`` (``reload_registry()``, after installing a plugin)."""
    global _LOADED
    _LOADED = None


def _distribution(ep: metadata.EntryPoint) -> tuple[str | None, str | None]:
    """The name and version of the distribution that publishes ``ep`` (None, None for one made by hand)."""
    dist = getattr(ep, "dist", None)
    if dist is None:
        return None, None
    meta = dist.metadata  # parses the METADATA file on every access: read both fields from one parse
    return meta["Name"], meta["Version"]


def _register(pm: pluggy.PluginManager, ep: metadata.EntryPoint, record: PluginRecord) -> None:
    try:
        module = ep.load()
    except BaseException as exc:  # noqa: BLE001 - a plugin may raise anything, even SystemExit
        if isinstance(exc, KeyboardInterrupt):
            raise
        record.fault(f"import of {ep.value!r} failed: {type(exc).__name__}: {exc}")
        return
    misspelled = [
        n for n in dir(module)
        if n.startswith("mixboard_") and n not in HOOK_NAMES and pm.parse_hookimpl_opts(module, n) is not None
    ]
    for name in misspelled:
        close = difflib.get_close_matches(name, HOOK_NAMES, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; hooks are {', '.join(HOOK_NAMES)}"
        record.fault(f"implements unknown hook {name!r}{hint}")
    if misspelled:
        return
    try:
        pm.register(module, name=ep.name)
    except Exception as exc:  # pluggy.PluginValidationError and friends
        record.fault(f"is not a valid plugin: {exc}")


def _call_each(pm: pluggy.PluginManager, hook: str, records: dict[str, PluginRecord]):
    """Call every implementation of a hook separately: pluggy does not say
    which plugin returned what, and one that raises must not stop the rest."""
    for impl in getattr(pm.hook, hook).get_hookimpls():
        record = records[impl.plugin_name]
        try:
            result = impl.function()
        except Exception as exc:
            record.fault(f"hook {hook}() raised {type(exc).__name__}: {exc}")
            continue
        if result is None:
            continue
        if not isinstance(result, (list, tuple)):
            record.fault(f"hook {hook}() must return a list, not {type(result).__name__}")
            continue
        yield record, result


def _collect_kinds(pm, records) -> dict[str, Kind]:
    kinds: dict[str, Kind] = {k.name: k for k in BUILTIN_KINDS}
    offered: dict[str, list[tuple[PluginRecord, Kind]]] = {}
    for record, items in _call_each(pm, "mixboard_kinds", records):
        for item in items:
            problem = _kind_problem(item)
            if problem:
                record.fault(problem)
            elif item.name in kinds:
                record.fault(f"defines kind {item.name!r}, which is built in; choose another name")
            else:
                offered.setdefault(item.name, []).append((record, item))
    for name, offers in sorted(offered.items()):
        if len(offers) > 1:
            _collision("kind", name, [r for r, _ in offers])
            continue
        record, kind = offers[0]
        kinds[name] = kind
        record.kinds.append(name)
    return kinds


def _collect_devices(pm, records) -> dict[str, Device]:
    offered: dict[str, list[tuple[PluginRecord, Device]]] = {}
    for record, items in _call_each(pm, "mixboard_devices", records):
        for item in items:
            problem = device_problem(item)
            if problem:
                record.fault(problem)
            else:
                offered.setdefault(item.name, []).append((record, item))
    devices: dict[str, Device] = {}
    for name, offers in sorted(offered.items()):
        if len(offers) > 1:
            _collision("device", name, [r for r, _ in offers])
            continue
        record, device = offers[0]
        devices[name] = device
        record.devices[name] = device
    return devices


def _kind_problem(item: Any) -> str | None:
    if not isinstance(item, Kind):
        return f"mixboard_kinds() returned {item!r}, which is not a mixboard.Kind"
    if not (isinstance(item.spec, type) and issubclass(item.spec, MixerSpec)):
        return f"kind {item.name!r}: spec must be a MixerSpec subclass"
    if not isinstance(item.impl, type):
        return f"kind {item.name!r}: impl must be a class"
    return None


def _collect_backends(pm, records, kinds) -> dict[str, BackendEntry]:
    offered: dict[str, list[tuple[PluginRecord, type]]] = {}
    for record, items in _call_each(pm, "mixboard_backends", records):
        for item in items:
            problem = _backend_problem(item, kinds)
            if problem:
                record.fault(problem)
            elif any(other is record for other, _ in offered.get(item.name, ())):
                record.fault(f"returns backend {item.name!r} twice")
            else:
                offered.setdefault(item.name, []).append((record, item))
    backends: dict[str, BackendEntry] = {}
    for name, offers in sorted(offered.items()):
        if len(offers) > 1:
            _collision("backend", name, [r for r, _ in offers])
            continue
        record, cls = offers[0]
        backends[name] = BackendEntry(cls, record.name, record.distribution, record.version)
        record.backends.append(name)
    return backends


def _backend_problem(item: Any, kinds: dict[str, Kind]) -> str | None:
    if not (isinstance(item, type) and issubclass(item, Backend)):
        return f"mixboard_backends() returned {item!r}, which is not a mixboard.Backend subclass"
    missing = [a for a in REQUIRED_DECLARATIONS if a not in _declared(item)]
    if missing:
        return f"backend class {item.__qualname__} does not declare {', '.join(missing)}"
    if not isinstance(item.name, str) or not item.name.isidentifier():
        return f"backend class {item.__qualname__}: name must be an identifier, not {item.name!r}"
    if item.api_version not in SUPPORTED_API_VERSIONS:
        supported = ", ".join(str(v) for v in SUPPORTED_API_VERSIONS)
        return (f"backend {item.name!r} targets plugin API version {item.api_version!r}; "
                f"this mixboard supports {supported}: upgrade mixboard or the plugin")
    if item.kind not in kinds:
        return f"backend {item.name!r} is of kind {item.kind!r}, which no installed plugin defines (kinds: {', '.join(sorted(kinds))})"
    if isinstance(item.devices, str) or isinstance(item.dtypes, str):
        return f"backend {item.name!r}: devices and dtypes must be tuples of names, not strings"
    return declaration_problem(item) or capture_problem(item)


def _declared(cls: type) -> set[str]:
    """Attributes set by the class or a parent below Backend (not Backend's own)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass is Backend:
            break
        names.update(vars(klass))
    return names


def _collision(what: str, name: str, owners: list[PluginRecord]) -> None:
    where = " and ".join(r.where() for r in owners)
    for record in owners:
        record.fault(f"{what} {name!r} is registered by both {where}; both are left out: uninstall one or disable it with MIXBOARD_DISABLE_PLUGINS")
