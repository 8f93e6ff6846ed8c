"""Run the conformance kit for mamba2_triton (mamba-ssm's kernels, harness.py) or gdn_fla
(fla-core's kernels, fla_harness.py) on CPU under Triton's interpreter (one process: the
shims must be in place before anything imports triton).

    python tests/triton_interp/run_kit.py [--backend gdn_fla] [--thorough] [--select CASE ...]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import fla_harness  # noqa: E402
import harness  # noqa: E402


def enable_mamba_ssm() -> str | None:
    """The shims, and a line naming the kernels' origin and type; None without the sources."""
    src = harness.mamba_ssm_source()
    if src is None:
        print("mamba-ssm sources not found; see tests/triton_interp/fetch_mamba_ssm.sh", file=sys.stderr)
        return None
    harness.enable(src)
    from mamba_ssm.ops.triton import ssd_chunk_scan

    kernel = ssd_chunk_scan._chunk_scan_fwd_kernel.fn  # under its Autotuner: the interpreter's, not a compiled one
    return f"mamba_ssm from {Path(ssd_chunk_scan.__file__).parents[3]}; kernels: {type(kernel).__name__}"


def enable_fla() -> str | None:
    if not fla_harness.fla_installed():
        print("fla-core not installed in this venv; see tests/triton_interp/ci.sh", file=sys.stderr)
        return None
    fla_harness.enable()
    from fla.ops.common import chunk_delta_h
    from fla.ops.gated_delta_rule import fused_recurrent

    from triton.runtime.autotuner import Autotuner, Heuristics

    def innermost(kernel):  # under its Autotuner and Heuristics: the interpreter's, not a compiled one
        while isinstance(kernel, (Autotuner, Heuristics)):
            kernel = kernel.fn
        return type(kernel).__name__

    kernels = {innermost(fused_recurrent.fused_recurrent_gated_delta_rule_fwd_kernel),
               innermost(chunk_delta_h.chunk_gated_delta_rule_fwd_kernel_h_blockdim64)}
    return f"fla from {Path(chunk_delta_h.__file__).parents[2]}; kernels: {', '.join(sorted(kernels))}"


SETUP = {"mamba2_triton": enable_mamba_ssm, "gdn_fla": enable_fla}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", choices=sorted(SETUP), default="mamba2_triton")
    ap.add_argument("--thorough", action="store_true")
    ap.add_argument("--select", nargs="*")
    ap.add_argument("--dtypes", nargs="*", default=["float32"])
    args = ap.parse_args(argv)
    origin = SETUP[args.backend]()
    if origin is None:
        return 2
    print(origin, flush=True)
    from mixboard.testing.conformance import run_suite

    start = time.perf_counter()
    report = run_suite(args.backend, "cpu", tuple(args.dtypes), select=args.select,
                       thorough=args.thorough or None)  # None: MIXBOARD_THOROUGH decides
    total = time.perf_counter() - start
    for r in report.results:
        err = "-" if r.max_abs_error is None else f"{r.max_abs_error:.2e}"
        print(f"{r.status:5} {r.seconds:7.2f}s  err {err:>9} tol {r.tolerance}  {r.case}"
              + (f"\n      {r.reason}" if r.reason else ""), flush=True)
    print(f"{report.counts()} in {total:.1f}s (thorough={report.thorough})")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
