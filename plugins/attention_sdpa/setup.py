"""mixboard-sdpa's one compiled part: the paged decode kernel of the
``sdpa_cpu`` backend (src/mixboard_sdpa/_paged_decode.c), built twice:
over float32 and over bfloat16 caches. Everything else is declared in
pyproject.toml. Optional: where it does not build (no C compiler, no
OpenMP), the distribution installs without it and ``mixboard backends``
lists ``sdpa_cpu`` as unavailable, saying so."""

from pathlib import Path

from setuptools import Extension, setup

# plugins/include/mixboard_vec.h: the vector helpers every first-party kernel shares
SHARED = Path(__file__).resolve().parent.parent / "include"

# _paged_decode_bf16.c includes _paged_decode.c with the cache's element type changed
BUILD = dict(include_dirs=[str(SHARED)],
             depends=[str(SHARED / "mixboard_vec.h"), str(SHARED / "mixboard_bf16.h"),
                      "src/mixboard_sdpa/_paged_decode.c"],
             extra_compile_args=["-O3", "-fopenmp", "-Wno-psabi"], extra_link_args=["-fopenmp"], optional=True)
setup(ext_modules=[
    Extension("mixboard_sdpa._paged_decode", sources=["src/mixboard_sdpa/_paged_decode.c"], **BUILD),
    Extension("mixboard_sdpa._paged_decode_bf16", sources=["src/mixboard_sdpa/_paged_decode_bf16.c"], **BUILD),
])
