"""The entry point ``cpu``: mixboard loads this module and asks it for backends."""

from mixboard import hookimpl

from .argmax_backend import ArgmaxCpu
from .embedding_backend import EmbeddingCpu
from .embedding_onednn_backend import EmbeddingOneDnn
from .linear_backend import LinearCpu
from .linear_onednn_backend import LinearOneDnn
from .moe_backend import MoECpu
from .rms_norm_backend import RMSNormCpu
from .rotary_backend import RotaryCpu


@hookimpl
def mixboard_backends():
    return [LinearCpu, LinearOneDnn, RMSNormCpu, RotaryCpu, EmbeddingCpu, EmbeddingOneDnn, ArgmaxCpu, MoECpu]
