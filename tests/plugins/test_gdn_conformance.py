"""gdn_torch runs the conformance kit of the kind its own plugin defines (``gated_delta_net``), as a vendor's
backend of a vendor's kind would."""

from mixboard_gdn.conformance import GatedDeltaNetConformance


class TestGdnTorch(GatedDeltaNetConformance):
    backend = "gdn_torch"
    device = "cpu"
    dtypes = ("float32", "bfloat16")
