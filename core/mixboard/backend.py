"""The Backend contract: a class that implements one kind.

The registry never instantiates a backend class; it reads its declarations
and calls its classmethods. A minimal backend::

    from mixboard import Backend

    class AcmeAttention(Backend):
        name = "acme_attn"           # unique across all plugins
        kind = "attention"
        priority = 50                # higher wins among backends that pass
        devices = ("cuda",)          # torch device types, or ("*",) for any
        dtypes = ("bfloat16", "float16")
        requires = ("acme_kernels",) # modules that must be importable (not imported to check)
        install_hint = "pip install acme-kernels"
        api_version = 1              # the plugin API this backend was written for

        @classmethod
        def check(cls, spec, env):
            return [] if spec.head_size in (64, 128) else [f"head_size {spec.head_size} is not 64 or 128"]

        @classmethod
        def make_impl(cls, spec, env):
            return AcmeAttentionImpl(spec)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping

if TYPE_CHECKING:
    from .environment import Environment
    from .metadata import CommonBatchMetadata
    from .state import StateSpec

# The plugin API this mixboard speaks, and the versions it still accepts.
API_VERSION = 1
SUPPORTED_API_VERSIONS = (1,)

ANY_DEVICE = "*"

# Attributes a backend class must set itself (inheriting them is not enough).
REQUIRED_DECLARATIONS = ("name", "kind", "devices", "dtypes", "api_version")


def _identity(common: "CommonBatchMetadata") -> "CommonBatchMetadata":
    return common


class Backend:
    name: ClassVar[str]
    kind: ClassVar[str]
    priority: ClassVar[int] = 0
    devices: ClassVar[tuple[str, ...]]
    dtypes: ClassVar[tuple[str, ...]]
    requires: ClassVar[tuple[str, ...]] = ()
    api_version: ClassVar[int]
    install_hint: ClassVar[str] = ""  # what to install or set when `requires` is missing
    description: ClassVar[str] = ""
    # Read by the conformance kit (mixboard.testing.conformance): the largest |backend - oracle|
    # per dtype this backend is held to; dtypes left out take the kit's defaults.
    tolerances: ClassVar[Mapping[str, float]] = {}
    # Known conformance failures: case id ("chunked_prefill[bfloat16]") or case name -> reason.
    # Shown as xfail by `mixboard check` and the kit's suites (strict: a pass is a failure).
    expected_failures: ClassVar[Mapping[str, str]] = {}

    @classmethod
    def check(cls, spec: Any, env: "Environment") -> list[str]:
        """Every reason this backend cannot serve a layer of ``spec`` in ``env``.

        Empty means it can. Device, dtype, ``requires`` and API version are
        checked by the registry before this is called; check what only the
        backend knows (head sizes, capabilities, feature support). Write
        sentences a user can act on.
        """
        return []

    @classmethod
    def state_spec(cls, spec: Any) -> "StateSpec":
        """The per-sequence state a layer keeps with this backend.

        The default is the kind's canonical layout; override to keep state
        in another layout (the runner allocates pools from this alone).
        """
        from .registry import get_registry

        return get_registry().kind(cls.kind).state_spec(spec)

    @classmethod
    def builder(cls, spec: Any, env: "Environment") -> Callable[["CommonBatchMetadata"], Any]:
        """A function the runner calls once per step per group, turning the
        common batch metadata into what this backend's kernels need (the
        ``meta`` its impl receives). The default passes it through."""
        return _identity

    @classmethod
    def make_impl(cls, spec: Any, env: "Environment") -> Any:
        """The object that runs the kind's operation (an instance of the kind's impl interface)."""
        raise NotImplementedError(f"backend {cls.name!r} does not implement make_impl")
