"""The Environment record: the facts a backend's ``check(spec, env)`` reads.

Getting one (``detect``, ``simulate``, ``for_device`` in environment.py)
reads the devices plugins describe, so it sits above the plugin loader;
this record needs nothing of the kind, so the Backend contract, selection
and the plan name it from here, below the loader."""

from __future__ import annotations

from dataclasses import dataclass, field

from . import cpu_features as _features

@dataclass(frozen=True)
class Environment:
    """What a backend's ``check(spec, env)`` reads.

    Fields:

    * ``device``: torch's device type: ``"cpu"``, ``"cuda"`` (NVIDIA *and*
      AMD ROCm GPUs: torch calls both cuda), ``"mps"``, ``"xpu"``, or an
      out-of-tree device a plugin describes (``mixboard.Device``).
    * ``runtime``: the GPU software stack on device cuda: ``"cuda"`` (NVIDIA)
      or ``"rocm"`` (AMD, HIP); None on cpu and where unknown (``--device
      cuda`` alone); a plugin's device may name its own.
    * ``arch``: the GPU architecture: ``"sm_90"``, ``"sm_80"`` (NVIDIA),
      ``"gfx942"``, ``"gfx90a"`` (AMD), a plugin device's name; None on cpu.
    * ``capability``: the NVIDIA compute capability, e.g. ``(9, 0)``; None
      on every other GPU: an AMD GPU has none (its 9.4 is not Hopper's 9.0).
    * ``cpu_features``: a frozenset from ``mixboard.cpu_features.CPU_FEATURES``:
      avx2, avx512, avx512_vnni, avx512_bf16, amx, neon, sve.
    * ``torch_version``.

    Helpers for ``check()``::

        env.is_nvidia, env.is_rocm          # runtime "cuda" / "rocm"
        env.capability_at_least(8, 0)       # False off NVIDIA and where unknown
        env.has_cpu_feature("avx512")       # an unknown name raises ValueError
        env.arch in ("gfx90a", "gfx942")    # an AMD check names architectures

    For example::

        if env.is_nvidia and not env.capability_at_least(8, 0):
            reasons.append(f"needs compute capability 8.0 or newer; this GPU has {env.capability_text}")
        if env.is_rocm and env.arch not in ("gfx90a", "gfx942"):
            reasons.append(f"supports MI200 and MI300 (gfx90a, gfx942); this GPU is {env.arch}")
        if env.device == "cpu" and not env.has_cpu_feature("avx512"):
            reasons.append("needs a CPU with AVX-512")

    An environment given an NVIDIA capability alone is completed with
    runtime ``"cuda"`` and its arch (``Environment("cuda", (9, 0))`` is
    ``sm_90``); a ROCm one given a capability is a ValueError.
    """

    device: str = "cpu"
    capability: tuple[int, int] | None = None  # NVIDIA compute capability only
    torch_version: str = ""
    runtime: str | None = None
    arch: str | None = None
    cpu_features: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self):
        if not isinstance(self.cpu_features, frozenset):
            object.__setattr__(self, "cpu_features", frozenset(self.cpu_features))
        if self.capability is None:
            return
        if self.runtime not in (None, "cuda"):
            raise ValueError(f"capability is an NVIDIA compute capability; a {self.runtime} environment has none "
                             f"(arch names its GPU)")
        if self.runtime is None:
            object.__setattr__(self, "runtime", "cuda")
        if self.arch is None:
            object.__setattr__(self, "arch", f"sm_{self.capability[0]}{self.capability[1]}")

    @property
    def is_nvidia(self) -> bool:
        return self.runtime == "cuda"

    @property
    def is_rocm(self) -> bool:
        return self.runtime == "rocm"

    def capability_at_least(self, major: int, minor: int = 0) -> bool:
        """True on an NVIDIA GPU of this compute capability or newer; False
        on any other device, on ROCm and where the capability is unknown."""
        return self.capability is not None and self.capability >= (major, minor)

    def has_cpu_feature(self, name: str) -> bool:
        if name not in _features.FLAGS:
            raise ValueError(f"unknown CPU feature {name!r}; known: {', '.join(_features.CPU_FEATURES)}")
        return name in self.cpu_features

    @property
    def capability_text(self) -> str | None:
        return None if self.capability is None else f"{self.capability[0]}.{self.capability[1]}"

    def to_dict(self) -> dict:
        return {"device": self.device, "capability": self.capability_text, "torch_version": self.torch_version,
                "runtime": self.runtime, "arch": self.arch, "cpu_features": _features.ordered(self.cpu_features)}

    def __str__(self) -> str:
        hardware = self.describe()
        return f"{self.device}{f' ({hardware})' if hardware else ''}, torch {self.torch_version or 'unknown'}"

    def describe(self) -> str:
        """The hardware in words: "NVIDIA sm_90, capability 9.0", "AMD ROCm gfx942", "avx2, avx512"."""
        if self.device == "cpu":
            return ", ".join(_features.ordered(self.cpu_features)) or "none of the listed CPU features"
        if self.is_nvidia:
            return f"NVIDIA {self.arch}, capability {self.capability_text}" if self.capability else f"NVIDIA {self.arch or 'GPU'}"
        if self.is_rocm:
            return f"AMD ROCm {self.arch or 'GPU'}"
        if self.device == "cuda":
            return "GPU unknown: --arch says which"
        return " ".join(p for p in (self.runtime, self.arch) if p)
