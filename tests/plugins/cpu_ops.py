"""What the tests of mixboard-cpu's backends share: an impl made and loaded
as a runner makes it, and the kind's oracle loaded with the same weights."""

from __future__ import annotations

from mixboard import simulate
from mixboard.kinds import DENSE_KINDS
from mixboard.testing import OP_ORACLES

CPU = simulate("cpu")
KIND_OF = {kind.spec: kind.name for kind in DENSE_KINDS}


def loaded(backend, spec, weights=None):
    """``backend``'s impl of ``spec``, with ``weights`` loaded (kinds with weights)."""
    impl = backend.make_impl(spec, CPU)
    impl.layer_name = "model.layers.0.test"
    if weights is not None:
        impl.load(weights)
    return impl


def oracle(spec, weights=None):
    """The kind's oracle (``mixboard.testing``) for ``spec``, with the same weights."""
    ref = OP_ORACLES[KIND_OF[type(spec)]](spec)
    if weights is not None:
        ref.load(weights)
    return ref
