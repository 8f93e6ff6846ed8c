"""mixboard-mamba1's one compiled part: the decode step of the ``mamba1_cpu``
backend (src/mixboard_mamba1/_decode_step.c). Everything else is declared in
pyproject.toml. Optional: where it does not build (no C compiler, no
OpenMP), the distribution installs without it and ``mixboard backends``
lists ``mamba1_cpu`` as unavailable, saying so."""

from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "mixboard_mamba1._decode_step",
    sources=["src/mixboard_mamba1/_decode_step.c"],
    extra_compile_args=["-O3", "-fopenmp", "-Wno-psabi"],
    extra_link_args=["-fopenmp"],
    optional=True,
)])
