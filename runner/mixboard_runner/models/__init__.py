"""Model architectures assembled from a handful of blocks."""

from . import bamba, lfm2, llama, mamba, mamba2

# model_type in config.json -> builder(ConfigReader, dtype) -> CausalLM
ARCHITECTURES = {"llama": llama.build, "mamba": mamba.build, "mamba2": mamba2.build, "lfm2": lfm2.build,
                 "bamba": bamba.build}
