"""Model architectures assembled from a handful of blocks."""

from . import bamba, falcon_h1, granitemoehybrid, jamba, lfm2, llama, mamba, mamba2, nemotron_h, qwen3_next

# model_type in config.json -> builder(ConfigReader, dtype) -> CausalLM
ARCHITECTURES = {"llama": llama.build, "mamba": mamba.build, "mamba2": mamba2.build, "lfm2": lfm2.build,
                 "bamba": bamba.build, "falcon_h1": falcon_h1.build, "nemotron_h": nemotron_h.build,
                 "granitemoehybrid": granitemoehybrid.build, "jamba": jamba.build,
                 "qwen3_next": qwen3_next.build}
