"""The ``mixboard`` command line: the front door.

Every command has ``--help``; ``--json`` output is a stable contract for
tools. Bad input gets one line on stderr and exit status 2; a layer nothing
can serve gets its reasons and exit status 1.
"""

from __future__ import annotations

import argparse
import json
import sys

from . import check_command, lock_command, registry_commands, run_commands, tune

EPILOG = """examples:
  mixboard run                             generate with the built-in demo hybrid (all four kinds)
  mixboard explain ./model --arch sm_90    per-layer backend choice with every rejected candidate's reasons
  mixboard plugins                         installed plugins and their faults
  mixboard backends --arch sm_90           what would run on an H100 (--device cuda --capability 9.0 alike)
  mixboard backends --arch gfx942          what would run on an MI300X (AMD ROCm)
  mixboard backends --device cpu --cpu-features avx2
                                           what would run on a CPU without AVX-512
  mixboard select attention --spec num_heads=32,num_kv_heads=8,head_size=128
  mixboard select mamba2 --backend mamba2=mamba2_torch --json
  mixboard lock ./model && mixboard run ./model --lock mixboard.lock
                                           write the plan down, then reproduce it exactly (or say what differs)
  mixboard tune ./model                    time every eligible backend per layer group and phase; lock the fastest

environment variables:
  MIXBOARD_BACKEND          default for --backend (KIND=BACKEND or LAYER_PATTERN=BACKEND, comma separated)
  MIXBOARD_PREFER           default for --prefer (the same rules; preferred where they can serve, not forced)
  MIXBOARD_BACKEND_OPTIONS  default for --backend-option (BACKEND.OPTION=VALUE, comma separated)
  MIXBOARD_LOCK             default for --lock (run, explain; and mixboard inside vLLM): a lock file to reproduce
  MIXBOARD_PLUGINS          load only these plugins (entry-point names, comma separated)
  MIXBOARD_DISABLE_PLUGINS  skip these plugins
  MIXBOARD_STRICT_PLUGINS   1: any plugin fault is an error (for CI)

--json output of every command: docs/json.md (key by key, with the stability promise)
"""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (exit status 2)."""

    def error(self, message: str):
        sys.stderr.write(f"{self.prog}: error: {message} (see {self.prog} --help)\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="mixboard",
        description="Pluggable backends for the token mixers of hybrid language models.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from mixboard import __version__

    parser.add_argument("--version", action="version", version=f"mixboard {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True
    run_commands.add_commands(commands)
    lock_command.add_commands(commands)
    tune.add_commands(commands)
    registry_commands.add_commands(commands)
    check_command.add_commands(commands)
    _point_json_to_its_page(commands)
    return parser


def _point_json_to_its_page(commands) -> None:
    """Every command with --json says where its keys are described (one place, so none is forgotten)."""
    for name, sub in commands.choices.items():
        if any("--json" in action.option_strings for action in sub._actions):  # noqa: SLF001
            line = (f"JSON (--json): a stable contract, every key described in docs/json.md, "
                    f"section \"mixboard {name} --json\".")
            sub.epilog = f"{sub.epilog}\n\n{line}" if sub.epilog else line


def main(argv: list[str] | None = None) -> int:
    from mixboard.errors import MixboardError, PluginError, SelectionError, UsageError

    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except UsageError as exc:
        sys.stderr.write(f"mixboard {args.command}: error: {exc}\n")
        return 2
    except SelectionError as exc:
        if getattr(args, "json", False):
            print(json.dumps({"error": str(exc), "candidates": exc.candidates}, indent=2))
        sys.stderr.write(f"mixboard {args.command}: {exc}\n")
        return 1
    except (PluginError, MixboardError) as exc:
        sys.stderr.write(f"mixboard {args.command}: {exc}\n")
        return 1
    except BrokenPipeError:  # `mixboard backends | head`
        return 0
    except KeyboardInterrupt:  # Ctrl-C: one line and the shell's status for SIGINT, no traceback
        sys.stderr.write(("\n" if sys.stderr.isatty() else "") + f"mixboard {args.command}: interrupted\n")
        return 130
