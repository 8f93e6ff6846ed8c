"""The flags that simulate an environment, shared by ``backends``, ``select``
and ``explain``: --device, --capability, --arch, --cpu-features."""

from __future__ import annotations

DEVICE_HELP = ("simulate this torch device type: cpu, cuda (NVIDIA and AMD GPUs), mps, xpu, or a device a plugin "
               "describes (default: detect this machine)")
CAPABILITY_HELP = "simulate this NVIDIA compute capability (implies --device cuda and --arch sm_XY)"
ARCH_HELP = ("simulate this GPU architecture: sm_80, sm_90, sm_100 (NVIDIA; implies the capability) or gfx90a, "
             "gfx942, gfx1100 (AMD ROCm, which has no compute capability); implies --device cuda unless --device "
             "names a plugin's device")
FEATURES_HELP = ("simulate a CPU with these features, comma separated: avx2, avx512, avx512_vnni, avx512_bf16, amx, "
                 "neon, sve, or none (default: this machine's; alone, implies --device cpu)")

EPILOG = """simulating an environment (nothing is detected once one of these is given):
  --arch sm_90                      an H100: device cuda, capability 9.0
  --arch gfx942                     an MI300X: device cuda, runtime rocm, no NVIDIA capability
  --device cpu --cpu-features amx   a Sapphire Rapids CPU (amx brings avx512 and avx2)
  --device cuda --capability 8.0    an A100 (the same as --arch sm_80)"""


def add_flags(p, device: bool = True) -> None:
    """``device=False`` where the command already has its own --device."""
    if device:
        p.add_argument("--device", help=DEVICE_HELP)
    p.add_argument("--capability", metavar="X.Y", help=CAPABILITY_HELP)
    p.add_argument("--arch", metavar="NAME", help=ARCH_HELP)
    p.add_argument("--cpu-features", metavar="A,B", help=FEATURES_HELP)


def resolve(args):
    """(environment, notes): what the flags describe, or this machine; notes
    say what a simulation assumed that the user did not give."""
    from mixboard.environment import resolve as resolve_environment

    env = resolve_environment(args.device, args.capability, args.arch, args.cpu_features)
    simulated = any(v is not None for v in (args.device, args.capability, args.arch, args.cpu_features))
    notes = []
    if simulated and env.device == "cpu" and args.cpu_features is None:
        notes.append("CPU features are this machine's; --cpu-features simulates others")
    if env.device == "cuda" and env.runtime is None:
        notes.append("the GPU is unknown: --arch sm_90 or --arch gfx942 says which")
    return env, notes


def print_environment(env, notes) -> None:
    print(f"environment: {env}")
    for note in notes:
        print(f"  ({note})")
