"""``mixboard check BACKEND``: the conformance kit without pytest.

Runs every case of the backend's kind (``mixboard.testing.conformance``)
and prints a pass/fail table with the worst error per case: the quick
cases, or with ``--thorough`` the long ones too. Exit status 0
when nothing failed (skips and declared failures are shown with their
reasons), 1 when a case failed, 2 for bad input (an unknown backend), 5
when every case was skipped (the backend cannot run here: a check that ran
nothing is not a pass) unless ``--allow-skip``.
"""

from __future__ import annotations

import json
import math
import sys
import textwrap

from mixboard.dtypes import DTYPES

from . import option_flags
from .table import render

NOTHING_RAN = 5  # every case skipped: pytest's status for "no tests ran"

DESCRIPTION = "\n\n".join(textwrap.fill(p, 79) for p in (
    "Check a backend against its kind's reference implementation over the kit's cases, in each dtype. Cases the "
    "backend cannot serve here are skipped with its reasons.",
    "A mixer kind's cases (attention, mamba1, mamba2, short_conv) are steps of sequences:",
    "quick (the default; seconds a backend): ragged batches, decodes after prefills, chunked prefills, state "
    "isolation, strided inputs, shared metadata, a sweep of shapes, and the cheap cases at real sizes: 40 sequences "
    "in a step (33 decodes beside prefills), slots handed out in order, blocks of 16 and 7 tokens, a 300-token "
    "prompt, every head size real models use (64, 80, 96, 128, 192, 256); and for a backend that declares it "
    "may be captured in a graph (capture), steps replayed from a recorded one with no host sync in forward "
    "(skipped, saying so, for the others).",
    "thorough (--thorough, or MIXBOARD_THOROUGH=1; minutes a backend): the quick cases, and the long ones at the "
    "kind's real sizes: a 4096-token prompt, a 2500-token prompt in chunks of 1024, 40 steps of decodes after "
    "prompts of up to 1000 tokens, 96 sequences in a step, and the kind's long shapes (a 700-token prompt each).",
    "A dense kind's (linear, rms_norm, rotary, embedding, argmax) are steps of rows: quick: 1, 16 and 37 rows, "
    "strided inputs, two layers turn about, and a sweep of shapes (odd sizes, a few real widths); thorough adds "
    "larger widths over 512 rows.",
    "Every case, and the JSON record: docs/conformance.md.",
))


def add_commands(commands) -> None:
    p = commands.add_parser(
        "check", help="run the conformance kit against an installed backend",
        description=DESCRIPTION,
        epilog="exit status: 0 nothing failed, 1 a case failed, 2 bad input, 5 every case was skipped (ran nothing)\n\n"
               "examples:\n  mixboard check sdpa\n  mixboard check sdpa --thorough            # before a release\n"
               "  mixboard check acme_attn --device cuda --dtype bfloat16 --json\n"
               "  mixboard check flash_attn --allow-skip   # in CI on machines that may lack its GPU\n"
               "  mixboard check linear_onednn --backend-option linear_onednn.layout=as_loaded\n"
               "  mixboard check linear_onednn --each-choice   # every layout in turn",
        formatter_class=_raw())
    p.add_argument("backend", metavar="BACKEND", help="an installed backend's name (see `mixboard backends`)")
    p.add_argument("--device", help="torch device to run on (default: this machine's, if the backend runs there)")
    p.add_argument("--dtype", action="append", choices=DTYPES, help="check this dtype (repeat; default: every "
                                                                     "dtype the backend declares)")
    p.add_argument("--case", action="append", metavar="NAME",
                   help="only this case (id or name; repeat); a long case named runs without --thorough")
    p.add_argument("--thorough", action="store_true",
                   help="the long cases too (minutes a backend; see above); MIXBOARD_THOROUGH=1 does the same")
    p.add_argument("--block-size", type=int, metavar="N",
                   help="tokens per block of paged state (default 4; mixer kinds only: a dense kind keeps no state)")
    option_flags.add_flag(p, environment=False)
    p.add_argument("--each-choice", action="store_true",
                   help="run the cases once on the backend's defaults, then once for each other choice of each of its "
                        "options that declares choices (`mixboard backends NAME` lists them)")
    p.add_argument("--exitfirst", "-x", action="store_true", help="stop at the first failing case")
    p.add_argument("--json", action="store_true", help="print a JSON list, one record per case (stable contract)")
    p.add_argument("--allow-skip", action="store_true",
                   help=f"exit 0 even when every case was skipped (by default a check that ran nothing exits "
                        f"{NOTHING_RAN}, as pytest does when no test ran)")
    p.set_defaults(run=cmd_check)


def _raw():
    import argparse

    return argparse.RawDescriptionHelpFormatter


def cmd_check(args) -> int:
    from mixboard.errors import UsageError
    from mixboard.testing.conformance import OpAdapter, run_suite
    from mixboard.testing.conformance.runner import resolve

    if args.block_size is not None:
        if args.block_size < 1:
            raise UsageError(f"--block-size must be at least 1, not {args.block_size}")
        target = resolve(args.backend)
        if isinstance(target.adapter, OpAdapter):  # said rather than ignored: its cases would not change
            raise UsageError(f"--block-size applies to kinds with paged state; {target.cls.name!r} serves the dense "
                             f"kind {target.cls.kind!r}, which keeps none")
    if args.case and not all(name.strip() for name in args.case):
        raise UsageError("--case needs a case's name or id, e.g. --case chunked_prefill or --case 'prefill_300[float32]'")
    reports = []
    for options in _variants(args):
        report = run_suite(args.backend, args.device, args.dtype, block_size=args.block_size or 4, select=args.case,
                           fail_fast=args.exitfirst, thorough=True if args.thorough else None, options=options)
        if args.case and not report.results:
            raise UsageError(f"--case {', '.join(args.case)} names no case of {args.backend!r} in the dtypes asked "
                             f"({', '.join(report.dtypes)}); `mixboard check {args.backend}` lists them")
        reports.append(report)
        if args.exitfirst and not report.ok:
            break
    if args.json:  # with --each-choice, each record says which values it ran with
        print(json.dumps([r.to_dict() | ({"options": rep.options} if args.each_choice else {})
                          for rep in reports for r in rep.results], indent=2))
    else:
        for i, rep in enumerate(reports):
            if i:
                print()
            _print_table(rep)
    if not all(rep.ok for rep in reports):
        return 1
    report = reports[0]
    if report.results and all(r.status == "skip" for r in report.results) and not args.allow_skip:
        sys.stdout.flush()
        sys.stderr.write(f"mixboard check: {_nothing_ran(report)}; --allow-skip accepts that\n")
        return NOTHING_RAN
    return 0


def _variants(args) -> list:
    """The option values to run the cases with: the given ones, or with --each-choice every choice in turn."""
    from mixboard.errors import UsageError
    from mixboard.options import choice_variants
    from mixboard.testing.conformance.runner import resolve

    if not args.each_choice:
        return [_options(args)]
    if args.backend_option:
        raise UsageError("--each-choice runs every choice in turn: give it without --backend-option")
    return choice_variants(resolve(args.backend).cls)


def _options(args) -> dict | None:
    """The checked backend's options from --backend-option (BACKEND.OPTION=VALUE, as everywhere)."""
    from mixboard import get_registry
    from mixboard.errors import UsageError
    from mixboard.option_rules import parse

    given = parse(option_flags.given(args, environment=False), get_registry().backends)
    others = sorted(set(given) - {args.backend})
    if others:
        raise UsageError(f"--backend-option names backend {others[0]!r}, but this checks {args.backend!r}: give "
                         f"{args.backend}.OPTION=VALUE")
    return given.get(args.backend)


def _nothing_ran(report) -> str:
    reasons = {r.reason for r in report.results}
    why = f": {reasons.pop()}" if len(reasons) == 1 else ", each with its reason"
    return f"{report.backend} ran no case on {report.device}: all {len(report.results)} were skipped{why}"


def _print_table(report) -> None:
    where = report.environment or "not available here"
    mode = "thorough" if report.thorough else "quick"
    print(f"mixboard check {report.backend} on {report.device} ({where}); dtypes {', '.join(report.dtypes)}; "
          f"{mode} mode" + (f"; options {option_flags.text({report.backend: report.options})}" if report.options
                            else ""))
    rows, previous = [], None
    for r in report.results:
        reason = r.reason or ""
        shown = "(same as above)" if reason and reason == previous else reason
        previous = reason
        rows.append([r.case, r.status, _number(r.max_abs_error), _number(r.tolerance), shown])
    print(render(["case", "status", "max abs error", "tolerance", "reason"], rows))
    counts = report.counts()
    seconds = sum(r.seconds for r in report.results)
    print(f"\n{counts['pass']} passed, {counts['fail']} failed, {counts['skip']} skipped, "
          f"{counts['xfail']} expected failures in {seconds:.1f} s")
    if not report.ok:
        sys.stdout.flush()
        sys.stderr.write(f"mixboard check: {report.backend} fails {counts['fail']} case(s)\n")


def _number(value) -> str:
    if value is None:
        return "-"
    if not math.isfinite(value):
        return str(value)
    return f"{value:.2e}" if value else "0"
