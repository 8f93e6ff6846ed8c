"""pytest plugin (entry point ``pytest11: mixboard``): run the conformance kit
against an installed backend with no test file written::

    pytest --mixboard-backend acme_attn [--mixboard-device cpu] [--mixboard-dtype float32]

Inactive unless asked: without ``--mixboard-backend`` it only adds its
options to ``pytest --help`` (nothing is imported beyond this module, which
imports neither torch nor the kit).
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
