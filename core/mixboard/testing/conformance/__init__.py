"""The conformance kit: checks a backend against its kind's oracle.

Three ways in, one set of cases (``cases.py``):

* pytest base classes a vendor subclasses: ``AttentionConformance``,
  ``Mamba1Conformance``, ``Mamba2Conformance``, ``ShortConvConformance``, and
  ``conformance_suite(adapter)`` for a kind a plugin defines (``suites.py``);
* ``pytest --mixboard-backend NAME``: the whole kit against an installed
  backend, no test file written (``mixboard.testing.pytest_plugin``);
* ``mixboard check NAME [--json]`` and ``run_suite(NAME or class)``
  without pytest (``runner.py``).

Each runs the quick cases by default, or the long ones too in the thorough
mode (``--thorough``, ``--mixboard-thorough``, ``thorough = True``,
``MIXBOARD_THOROUGH=1``; see ``modes.py``).

Importing this package imports torch.
"""

from .cases import Case, kind_cases
from .kinds import ADAPTERS, KindAdapter, adapter_of
from .runner import CaseResult, SuiteReport, run_case, run_suite
from .suites import (
    AttentionConformance, ConformanceSuite, Mamba1Conformance, Mamba2Conformance, ShortConvConformance,
    conformance_suite,
)
from .tolerances import DEFAULT_TOLERANCES, tolerance_for

__all__ = [
    "ADAPTERS", "AttentionConformance", "Case", "CaseResult", "ConformanceSuite", "DEFAULT_TOLERANCES", "KindAdapter",
    "Mamba1Conformance", "Mamba2Conformance", "ShortConvConformance", "SuiteReport", "adapter_of", "conformance_suite",
    "kind_cases", "run_case", "run_suite", "tolerance_for",
]
