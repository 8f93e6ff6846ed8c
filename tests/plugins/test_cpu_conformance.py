"""mixboard-cpu's backends through the conformance kit, as a vendor runs it
over theirs: every case of each dense kind's suite at float32 (an untied
table's cases skip for the embedding backends, with their reason)."""

from __future__ import annotations

import pytest

from mixboard.testing.conformance import (
    ArgmaxConformance, EmbeddingConformance, LinearConformance, MoEConformance, RMSNormConformance,
    RotaryConformance,
)
from mixboard_cpu.compiled import PANELS, ROWS, kernel_unusable

panels = pytest.mark.skipif(bool(kernel_unusable(PANELS)), reason=f"{PANELS} is not built")
rows = pytest.mark.skipif(bool(kernel_unusable(ROWS)), reason=f"{ROWS} is not built")


@panels
class TestLinearCpu(LinearConformance):
    backend = "linear_cpu"
    device = "cpu"


class TestLinearOneDnn(LinearConformance):
    backend = "linear_onednn"
    device = "cpu"


class TestLinearOneDnnAsLoaded(LinearConformance):
    """A suite may set the backend's options (every layout: test_linear_onednn_layout.py)."""

    backend = "linear_onednn"
    device = "cpu"
    options = {"layout": "as_loaded"}


@panels
class TestEmbeddingCpu(EmbeddingConformance):
    backend = "embedding_cpu"
    device = "cpu"


class TestEmbeddingOneDnn(EmbeddingConformance):
    backend = "embedding_onednn"
    device = "cpu"


@rows
class TestRMSNormCpu(RMSNormConformance):
    backend = "rms_norm_cpu"
    device = "cpu"


@rows
class TestRotaryCpu(RotaryConformance):
    backend = "rotary_cpu"
    device = "cpu"


@rows
class TestArgmaxCpu(ArgmaxConformance):
    backend = "argmax_cpu"
    device = "cpu"


@panels
class TestMoECpu(MoEConformance):
    backend = "moe_cpu"
    device = "cpu"
