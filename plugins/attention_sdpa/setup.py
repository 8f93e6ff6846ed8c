"""mixboard-sdpa's one compiled part: the paged decode kernel of the
``sdpa_cpu`` backend (src/mixboard_sdpa/_paged_decode.c). Everything else is
declared in pyproject.toml. Optional: where it does not build (no C
compiler, no OpenMP), the distribution installs without it and ``mixboard
backends`` lists ``sdpa_cpu`` as unavailable, saying so."""

from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "mixboard_sdpa._paged_decode",
    sources=["src/mixboard_sdpa/_paged_decode.c"],
    extra_compile_args=["-O3", "-fopenmp", "-Wno-psabi"],
    extra_link_args=["-fopenmp"],
    optional=True,
)])
