"""``--threads``: how many threads a run's ops use, and a note when the machine is too busy for them.

torch's ops and mixboard's C kernels share one OpenMP runtime (the kernels link torch's libgomp), so
``torch.set_num_threads`` sets both. A parallel op waits at its end for every thread of its team:
where other processes hold the cores, each op waits for a thread the scheduler has put aside, and a
run with a team as large as the machine slows down many times over, more than its share of the
cores explains (benchmarks/README.md, "Threads on a busy machine").
"""

from __future__ import annotations

import os

HELP = ("threads for the model's ops and kernels (default: torch's, $OMP_NUM_THREADS up to the cores, else one "
        "per physical core); on a machine other processes keep busy, fewer threads than cores is often faster")


def add_flag(p) -> None:
    p.add_argument("--threads", type=int, default=None, metavar="N", help=HELP)


def apply(args) -> int:
    """Set ``--threads`` where given and return the threads the run uses."""
    import torch

    from mixboard.errors import UsageError

    if args.threads is not None:
        if args.threads < 1:
            raise UsageError(f"--threads must be at least 1, not {args.threads}")
        torch.set_num_threads(args.threads)
    return torch.get_num_threads()


def busy_line(args, command: str, threads: int) -> str | None:
    """The stderr line for a run of ``threads`` threads when the machine's other work leaves fewer cores
    than that, taken before the run's own work joins the load average; None when they fit, and when
    ``--threads`` was given: that was the user's choice. The caller says it once the run has ended
    well, so that a mistake or a failure keeps its one line."""
    if args.threads is not None:
        return None
    said = busy_note(threads, os.getloadavg()[0], cores())
    return f"mixboard {command}: note: {said}\n" if said else None


def cores() -> int:
    """The cores this process may run on (taskset and cgroup cpusets narrow them). The load average
    counts the whole host's work: in a cpuset on a busy larger host the notes may see a load the
    cpuset's own cores do not carry."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def busy_note(threads: int, load: float, cores: int) -> str | None:
    """The note for a run of ``threads`` threads where the load average (work of other processes:
    this one has not started yet) is ``load`` on ``cores`` cores; None when they fit."""
    if threads > 1 and load + threads > cores + 0.75:  # a last job's tail of the average is no reason
        free = max(1, round(cores - load))
        return (f"the machine is busy (load {load:.1f} on {cores} cores): with {threads} threads, every parallel "
                f"op waits for whichever thread other processes keep off its core; "
                f"--threads {min(free, threads - 1)} may be faster")
    return None
