"""mixboard-mamba1's one compiled part: the decode step of the ``mamba1_cpu``
backend (src/mixboard_mamba1/_decode_step.c). Everything else is declared in
pyproject.toml. Optional: where it does not build (no C compiler, no
OpenMP), the distribution installs without it and ``mixboard backends``
lists ``mamba1_cpu`` as unavailable, saying so."""

from pathlib import Path

from setuptools import Extension, setup

# plugins/include/mixboard_vec.h: the vector helpers every first-party kernel shares
SHARED = Path(__file__).resolve().parent.parent / "include"

setup(ext_modules=[Extension(
    "mixboard_mamba1._decode_step",
    sources=["src/mixboard_mamba1/_decode_step.c"],
    include_dirs=[str(SHARED)],
    depends=[str(SHARED / "mixboard_vec.h"), str(SHARED / "mixboard_bf16.h")],
    extra_compile_args=["-O3", "-fopenmp", "-Wno-psabi"],
    extra_link_args=["-fopenmp"],
    optional=True,
)])
