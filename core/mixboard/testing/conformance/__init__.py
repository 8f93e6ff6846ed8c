"""The conformance kit: checks a backend against its kind's oracle.

Three ways in, one set of cases (``cases.py``):

* pytest base classes a vendor subclasses: ``AttentionConformance``,
  ``Mamba1Conformance``, ``Mamba2Conformance``, ``ShortConvConformance``, the
  dense kinds' ``LinearConformance``, ``RMSNormConformance``,
  ``RotaryConformance``, ``EmbeddingConformance``, ``ArgmaxConformance``,
  ``MoEConformance``, and
  ``conformance_suite(adapter)`` for a kind a plugin defines (``suites.py``);
* ``pytest --mixboard-backend NAME``: the whole kit against an installed
  backend, no test file written (``mixboard.testing.pytest_plugin``);
* ``mixboard check NAME [--json]`` and ``run_suite(NAME or class)``
  without pytest (``runner.py``).

A mixer kind's cases are steps of sequences (``cases.py``); a dense kind's,
steps of rows through stateless ops (``op_cases.py``, ``op_runner.py``).
Each runs the quick cases by default, or the long ones too in the thorough
mode (``--thorough``, ``--mixboard-thorough``, ``thorough = True``,
``MIXBOARD_THOROUGH=1``; see ``modes.py``).

Importing this package imports torch.
"""

from ...options import choice_variants
from .cases import Case, kind_cases
from .kinds import ADAPTERS, KindAdapter, adapter_of
from .op_cases import OpCase, op_cases
from .op_kinds import OP_ADAPTERS
from .ops import OpAdapter, OpCall
from .runner import CaseResult, SuiteReport, run_case, run_suite
from .suites import (
    ArgmaxConformance, AttentionConformance, ConformanceSuite, EmbeddingConformance, LinearConformance,
    Mamba1Conformance, Mamba2Conformance, MoEConformance, RMSNormConformance, RotaryConformance,
    ShortConvConformance, conformance_suite,
)
from .tolerances import DEFAULT_TOLERANCES, tolerance_for

__all__ = [
    "ADAPTERS", "AttentionConformance", "Case", "CaseResult", "ConformanceSuite", "DEFAULT_TOLERANCES", "KindAdapter",
    "Mamba1Conformance", "Mamba2Conformance", "ShortConvConformance", "SuiteReport", "adapter_of", "conformance_suite",
    "kind_cases", "run_case", "run_suite", "tolerance_for",
    "OP_ADAPTERS", "OpAdapter", "OpCall", "OpCase", "op_cases", "LinearConformance", "RMSNormConformance",
    "RotaryConformance", "EmbeddingConformance", "ArgmaxConformance", "MoEConformance", "choice_variants",
]
