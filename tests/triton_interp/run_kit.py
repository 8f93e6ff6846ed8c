"""Run the conformance kit for mamba2_triton on CPU under Triton's interpreter
(one process: the shims must be in place before anything imports triton).

    python tests/triton_interp/run_kit.py [--thorough] [--select CASE ...]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import harness  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--thorough", action="store_true")
    ap.add_argument("--select", nargs="*")
    ap.add_argument("--dtypes", nargs="*", default=["float32"])
    args = ap.parse_args(argv)
    src = harness.mamba_ssm_source()
    if src is None:
        print("mamba-ssm sources not found; see tests/triton_interp/fetch_mamba_ssm.sh", file=sys.stderr)
        return 2
    harness.enable(src)
    from mixboard.testing.conformance import run_suite
    from mamba_ssm.ops.triton import ssd_chunk_scan

    kernel = ssd_chunk_scan._chunk_scan_fwd_kernel.fn  # under its Autotuner: the interpreter's, not a compiled one
    print(f"mamba_ssm from {Path(ssd_chunk_scan.__file__).parents[3]}; kernels: {type(kernel).__name__}", flush=True)

    start = time.perf_counter()
    report = run_suite("mamba2_triton", "cpu", tuple(args.dtypes), select=args.select,
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
