"""mixboard-shortconv's one compiled part: the gated conv step of the
``short_conv_cpu`` backend (src/mixboard_shortconv/_gated_conv.c).
Everything else is declared in pyproject.toml. Optional: where it does not
build (no C compiler, no OpenMP), the distribution installs without it and
``mixboard backends`` lists ``short_conv_cpu`` as unavailable, saying so."""

from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "mixboard_shortconv._gated_conv",
    sources=["src/mixboard_shortconv/_gated_conv.c"],
    extra_compile_args=["-O3", "-fopenmp", "-Wno-psabi"],
    extra_link_args=["-fopenmp"],
    optional=True,
)])
