"""mixboard-mamba2's compiled parts, the kernels of the ``mamba2_cpu``
backend: the prefills' SSD scan with the conv and the gated norm
(src/mixboard_mamba2/_prefill.c) and the decodes' state update
(src/mixboard_mamba2/_decode.c). Everything else is declared in
pyproject.toml. Optional: where they do not build (no C compiler, no
OpenMP), the distribution installs without them and ``mixboard backends``
lists ``mamba2_cpu`` as unavailable, saying so; a build with ``_prefill``
and without ``_decode`` runs the decodes in PyTorch."""

from pathlib import Path

from setuptools import Extension, setup

# plugins/include/mixboard_vec.h: the vector helpers every first-party kernel shares
SHARED = Path(__file__).resolve().parent.parent / "include"
BUILD = dict(include_dirs=[str(SHARED)], depends=[str(SHARED / "mixboard_vec.h"), str(SHARED / "mixboard_bf16.h")],
             extra_compile_args=["-O3", "-fopenmp", "-Wno-psabi"], extra_link_args=["-fopenmp"], optional=True)

# The module names stay literal: tests/compiled_kernels.py reads them from this file.
setup(ext_modules=[
    Extension("mixboard_mamba2._prefill", sources=["src/mixboard_mamba2/_prefill.c"], **BUILD),
    Extension("mixboard_mamba2._decode", sources=["src/mixboard_mamba2/_decode.c"], **BUILD),
])
