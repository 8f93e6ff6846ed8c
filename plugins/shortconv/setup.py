"""mixboard-shortconv's one compiled part: the gated conv step of the
``short_conv_cpu`` backend (src/mixboard_shortconv/_gated_conv.c), built
twice: over float32 and over bfloat16. Everything else is declared in
pyproject.toml. Optional: where it does not build (no C compiler, no
OpenMP), the distribution installs without it and ``mixboard backends``
lists ``short_conv_cpu`` as unavailable, saying so."""

from pathlib import Path

from setuptools import Extension, setup

# plugins/include: the vector and bfloat16 helpers every first-party kernel shares
SHARED = Path(__file__).resolve().parent.parent / "include"

# _gated_conv_bf16.c includes _gated_conv.c with the element type changed
BUILD = dict(include_dirs=[str(SHARED)],
             depends=[str(SHARED / "mixboard_vec.h"), str(SHARED / "mixboard_bf16.h"),
                      "src/mixboard_shortconv/_gated_conv.c"],
             extra_compile_args=["-O3", "-fopenmp", "-Wno-psabi"], extra_link_args=["-fopenmp"], optional=True)
setup(ext_modules=[
    Extension("mixboard_shortconv._gated_conv", sources=["src/mixboard_shortconv/_gated_conv.c"], **BUILD),
    Extension("mixboard_shortconv._gated_conv_bf16", sources=["src/mixboard_shortconv/_gated_conv_bf16.c"], **BUILD),
])
