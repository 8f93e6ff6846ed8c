"""The two phases of a step: ``prefill`` (a sequence's new tokens after a
prompt or a chunk of one) and ``decode`` (one new token after earlier
context). A layer may run each phase with its own backend when both keep
its state in the same layout; rules name a phase with ``@``
(``attention@decode=sdpa``).

A step's rows are decodes first (``CommonBatchMetadata``), so a layer split
by phase runs its first ``num_decodes`` rows through the decode backend and
the rest through the prefill one.
"""

from __future__ import annotations

PREFILL = "prefill"
DECODE = "decode"
PHASES = (PREFILL, DECODE)
