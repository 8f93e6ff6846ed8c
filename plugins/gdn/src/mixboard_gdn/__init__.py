"""mixboard-gdn: the kind ``gated_delta_net`` (Gated DeltaNet), defined by a plugin as a vendor would
define a kind of its own, with its oracle, its conformance adapter and ``gdn_torch``."""

from .kind import GATED_DELTA_NET, GatedDeltaNetImpl, GatedDeltaNetSpec, GatedDeltaNetWeights, gdn_state

__all__ = ["GATED_DELTA_NET", "GatedDeltaNetImpl", "GatedDeltaNetSpec", "GatedDeltaNetWeights", "gdn_state"]
