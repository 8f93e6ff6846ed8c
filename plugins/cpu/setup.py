"""mixboard-cpu's compiled parts: the products on panels
(src/mixboard_cpu/_panels.c) and the row operations (src/mixboard_cpu/_rows.c).
Everything else is declared in pyproject.toml. Both are optional: where they
do not build (no C compiler, no OpenMP), the distribution installs without
them, ``mixboard backends`` lists the backends that need them as unavailable,
saying so, and ``linear_onednn`` and ``embedding_onednn``, pure Python, still
serve."""

from pathlib import Path

from setuptools import Extension, setup

# plugins/include/mixboard_vec.h: the vector helpers every first-party kernel shares
SHARED = Path(__file__).resolve().parent.parent / "include"
BUILD = dict(include_dirs=[str(SHARED)], depends=[str(SHARED / "mixboard_vec.h")],
             extra_compile_args=["-O3", "-fopenmp", "-Wno-psabi"], extra_link_args=["-fopenmp"], optional=True)

# The module names stay literal: tests/compiled_kernels.py reads them from this file.
setup(ext_modules=[
    Extension("mixboard_cpu._panels", sources=["src/mixboard_cpu/_panels.c"], **BUILD),
    Extension("mixboard_cpu._rows", sources=["src/mixboard_cpu/_rows.c"], **BUILD),
])
