"""pytest plugin (entry point ``pytest11: mixboard``): run the conformance kit
against an installed backend with no test file written::

    pytest --mixboard-backend acme_attn [--mixboard-device cpu] [--mixboard-dtype float32] [--mixboard-thorough]

Inactive unless asked: without ``--mixboard-backend`` it only adds its
options to ``pytest --help`` (nothing is imported beyond this module, which
imports neither torch nor the kit).

A backend whose every case was skipped (it cannot run here) ran nothing,
which is not a pass: the session then exits 5, pytest's status for "no
tests ran", with one line saying which backend and why, unless
``--mixboard-allow-skip``.
"""

from __future__ import annotations

import os


def pytest_addoption(parser):
    group = parser.getgroup("mixboard", "mixboard conformance kit")
    group.addoption("--mixboard-backend", action="append", default=[], metavar="NAME",
                    help="run the conformance kit against this installed backend (repeat, or comma separate, "
                         "for several); the run then holds only the kit's tests and any paths given")
    group.addoption("--mixboard-device", default=None, metavar="DEVICE",
                    help="torch device for --mixboard-backend (default: this machine's, if the backend runs there)")
    group.addoption("--mixboard-dtype", action="append", default=[], metavar="DTYPE",
                    help="dtype for --mixboard-backend (repeat; default: every dtype the backend declares)")
    group.addoption("--mixboard-thorough", action="store_true",
                    help="the kit's thorough mode: besides the quick cases (small sizes, plus 40 sequences a step, "
                         "real head sizes, other block sizes, a 300-token prompt), the long ones: prompts of 2500 and "
                         "4096 tokens, 40 decode steps after 1000 tokens, 96 sequences a step, long shapes; minutes a "
                         "backend. Applies to --mixboard-backend and to every conformance suite class of the run "
                         "(as MIXBOARD_THOROUGH=1 does)")
    group.addoption("--mixboard-allow-skip", action="store_true",
                    help="pass a backend whose every case was skipped (by default that exits 5: it ran nothing)")


def requested_backends(config) -> list[str]:
    return [n.strip() for opt in config.getoption("mixboard_backend") for n in opt.split(",") if n.strip()]


def pytest_configure(config):
    if not requested_backends(config):
        return
    # Collect the kit's generated tests; paths from testpaths or the current
    # folder are replaced (asked for the kit, the user wants the kit), paths
    # given on the command line are kept.
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "conformance", "pytest_items.py")
    if config.args_source == config.ArgsSource.ARGS:
        config.args.append(here)
    else:
        config.args[:] = [here]
    if not config.getoption("mixboard_allow_skip"):
        config.pluginmanager.register(NothingRan(here), "mixboard-nothing-ran")


NOTHING_RAN = 5  # pytest.ExitCode.NO_TESTS_COLLECTED: "no tests ran"


class NothingRan:
    """Fails a session in which some backend's kit tests all skipped."""

    def __init__(self, items_file: str):
        self.items_file = items_file
        self.backend_of: dict[str, str] = {}  # the kit's test ids -> their backend
        self.outcomes: dict[str, set[str]] = {}  # backend -> outcomes seen
        self.reasons: dict[str, set[str]] = {}
        self.lines: list[str] = []

    def pytest_collection_modifyitems(self, items):
        for item in items:
            suite = getattr(getattr(item, "callspec", None), "params", {}).get("suite")
            if suite is not None and str(item.path) == self.items_file:
                self.backend_of[item.nodeid] = suite.backend

    def pytest_runtest_logreport(self, report):
        backend = self.backend_of.get(report.nodeid)
        if backend is None or (report.when != "call" and report.passed):
            return
        skipped = report.skipped and not hasattr(report, "wasxfail")  # an xfail ran
        self.outcomes.setdefault(backend, set()).add("skip" if skipped else "ran")
        if skipped and isinstance(report.longrepr, tuple):
            self.reasons.setdefault(backend, set()).add(str(report.longrepr[2]).removeprefix("Skipped: "))

    def pytest_sessionfinish(self, session):
        for backend, seen in self.outcomes.items():
            if seen == {"skip"}:
                reasons = self.reasons.get(backend, set())
                why = f": {reasons.pop()}" if len(reasons) == 1 else ", each with its reason"
                self.lines.append(f"mixboard: {backend} ran no case: every one was skipped{why}; "
                                  f"--mixboard-allow-skip accepts that")
        if self.lines and session.exitstatus == 0:
            session.exitstatus = NOTHING_RAN

    def pytest_terminal_summary(self, terminalreporter):
        for line in self.lines:
            terminalreporter.write_line(line, red=True)
