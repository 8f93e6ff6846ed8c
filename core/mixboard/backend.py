"""The Backend contract: a class that implements one kind.

The registry never instantiates a backend class; it reads its declaration
and calls its classmethods. A backend states its facts once, in one
``mixboard.Declaration`` (mixboard.declaration), and holds the code; its
impl (the object that runs the kind's ``forward``; docs/plugins.md builds a
complete one)::

    from mixboard import AttentionImpl, Backend, Declaration

    class AcmeAttentionImpl(AttentionImpl):
        def __init__(self, spec):
            self.spec = spec

        def forward(self, q, k, v, state, meta):
            ...  # the kind's contract: help(mixboard.AttentionImpl)

    class AcmeAttention(Backend):
        declaration = Declaration(
            name="acme_attn",                    # unique across all plugins
            kind="attention",
            priority=5,                          # higher wins among backends that pass (first-party: 10, 20, 100)
            devices=("*",),                      # torch device types, or ("*",) for any
            dtypes=("float32", "bfloat16", "float16"),
            api_version=1,                       # the plugin API this backend was written for
        )

        @classmethod
        def check(cls, spec, env):
            return [] if spec.head_size <= 256 else [f"head_size {spec.head_size} is above 256"]

        @classmethod
        def make_impl(cls, spec, env):
            return AcmeAttentionImpl(spec)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping

from .capture import NEVER
from .declaration import Declaration, apply
from .errors import UsageError
from .kinds import builtin_kind

if TYPE_CHECKING:
    from .environment_facts import Environment
    from .kinds import Kind
    from .metadata import CommonBatchMetadata
    from .options import Option, OptionValues
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
    """A class that implements one kind; subclass it and state its facts in
    one ``declaration = mixboard.Declaration(...)`` (mixboard.declaration:
    facts a plugin's backends share are written once and extended per
    backend). The facts:

    name: unique among all installed backends (two plugins registering one
        name are both left out).
    kind: the kind served: a mixer kind (attention, mamba1, mamba2,
        short_conv), a dense kind (linear, rms_norm, rotary, embedding,
        argmax, moe), or a kind a plugin defines.
    priority: int, default 0. Among the backends that pass every check for
        a layer, the highest priority wins; ties break on name. First-party
        values: 100 for a vendor library's kernels (flash_attn,
        mamba2_triton, mamba1_cuda, short_conv_cuda), 20 for the
        first-party CPU kernels (sdpa_cpu, mamba2_cpu, mamba1_cpu,
        short_conv_cpu; mixboard-cpu's linear_cpu, rms_norm_cpu, ...), 15
        for portable kernels below those (mixboard-triton's, oneDNN's
        products), 10 for portable PyTorch (sdpa, mamba2_torch,
        mamba1_torch, short_conv_torch, linear_torch, ...). A negative
        value is only lower: the backend is still chosen where nothing
        above it passes.
    devices: torch device types served ("cuda", "cpu", ...), or ("*",).
    dtypes: the layer dtypes served ("float32", "bfloat16", ...).
    requires: module names the kernels need, found with
        ``importlib.util.find_spec`` (never imported to check);
        ``install_hint`` is shown when one is missing.
    api_version: the plugin API written for (``mixboard.API_VERSION``).
    description: one line about the backend (optional; `mixboard backends NAME` shows it).
    tolerances, expected_failures: what the conformance kit holds the
        backend to (optional; docs/conformance.md).
    options: what users may set for this backend, a tuple of
        ``mixboard.Option`` (name, type, default, one line of doc; optional).
        A backend that declares options gets every one's value (the user's,
        else the default) as the keyword argument ``options`` (a read-only
        ``mixboard.OptionValues``) of ``make_impl`` and ``builder``; one
        that declares none is called without it. Users set them with
        ``--backend-option BACKEND.OPTION=VALUE`` ($MIXBOARD_BACKEND_OPTIONS,
        ``Engine(backend_options=...)``); the values are part of the plan
        and its fingerprint.
    capture: how far ``forward`` may be captured in a graph (recorded once,
        replayed with each new step's metadata copied into the same
        tensors): ``"never"`` (the default: eager every step),
        ``"uniform_decode"`` (steps of decodes only, as many sequences) or
        ``"any"`` (any step of as many tokens and sequences). See
        ``mixboard.capture``; the conformance kit checks the declaration.

    name, kind, devices, dtypes and api_version are required. Backend copies
    the declaration's facts onto the class when it is created (``cls.name``,
    ``cls.priority``, ... are where mixboard reads them); a class with a
    declaration that also sets a fact as an attribute is a TypeError. A
    subclass of a registered backend states its own declaration
    (``Parent.declaration(name=...)``). (Facts set as bare class attributes,
    API 1's first form, still load.) The registry calls the classmethods
    below and never makes an instance. In order: ``check`` when selecting
    (listing and explaining too); ``state_spec`` when planning the pools;
    ``builder`` once per group of layers (same backend, same spec) and
    ``make_impl`` once per layer when a model is built; then every step, the
    builder's function once and each layer's ``impl.forward`` once. The
    forward contract of each kind is its impl interface's docstring:
    ``help(mixboard.AttentionImpl)``, and ``help(mixboard.CommonBatchMetadata)``
    for the step's metadata.
    """

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
    # What users may set (mixboard.options): each value reaches make_impl and builder as `options`.
    options: ClassVar[tuple["Option", ...]] = ()
    # How far forward may be captured in a graph (mixboard.capture): "never", "uniform_decode" or "any".
    capture: ClassVar[str] = NEVER
    # The record the facts above come from (set by the subclass; mixboard.declaration).
    declaration: ClassVar["Declaration | None"] = None

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        if "declaration" in vars(cls):
            apply(cls)

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
        A kind a plugin defines is known only to the registry that loaded
        it, so for such a kind the registry and the conformance kit fill in
        the default themselves (``state_of``); called directly, this
        default knows the built-in kinds alone.
        """
        kind = builtin_kind(cls.kind)
        if kind is None:
            raise UsageError(f"backend {cls.name!r} serves kind {cls.kind!r}, which is not built in: its default state "
                             f"is that of the kind the registry loaded (registry.kind({cls.kind!r}).state_spec(spec))")
        return kind.state_spec(spec)

    @classmethod
    def builder(cls, spec: Any, env: "Environment", options: "OptionValues | None" = None
                ) -> Callable[["CommonBatchMetadata"], Any]:
        """A function from the step's ``CommonBatchMetadata`` to the ``meta``
        this backend's impls receive: what its kernels need (offsets in
        their dtype, a plan of the step), worked out once instead of once
        per layer. Called once per group of layers (same backend, same
        spec) when a model is built; the function is then called once per
        step, and its result is given to every layer of the group. It must
        not change the metadata; its result's public fields must not change
        after it returns (fields named ``_...`` may serve as a memo or
        workspace). The default passes the metadata through. A backend that
        declares ``options`` gets their values as ``options``."""
        return _identity

    @classmethod
    def make_impl(cls, spec: Any, env: "Environment", options: "OptionValues | None" = None) -> Any:
        """The object that runs the kind's operation: an instance of a
        subclass of the kind's impl interface (``mixboard.AttentionImpl``,
        ...), one per layer. Import heavy modules here, not at module level.
        A backend that declares ``options`` gets their values as
        ``options`` (``make_impl(cls, spec, env, options)``); one that
        declares none is called as ``make_impl(cls, spec, env)``."""
        raise NotImplementedError(f"backend {cls.name!r} does not implement make_impl")


def declares_state_spec(backend: type) -> bool:
    """Whether ``backend`` keeps state in a layout of its own (overrides ``state_spec``)."""
    return getattr(backend.state_spec, "__func__", None) is not Backend.state_spec.__func__


def state_of(backend: type, kind: "Kind", spec: Any) -> "StateSpec":
    """The state a layer of ``spec`` keeps with ``backend``: its own layout
    where it declares one, else the canonical layout of ``kind`` (the kind
    object the caller resolved, a plugin's kind included)."""
    return backend.state_spec(spec) if declares_state_spec(backend) else kind.state_spec(spec)
