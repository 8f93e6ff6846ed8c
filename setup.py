"""The one compiled part of the mixboard distribution: the runner's CPU
products (runner/mixboard_runner/_cpu_kernels.c). Everything else is declared
in pyproject.toml. The extension is optional: where it does not build (no C
compiler, no OpenMP), mixboard installs without it and the runner says so
(``mixboard run`` prints which products it runs)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "mixboard_runner._cpu_kernels",
    sources=["runner/mixboard_runner/_cpu_kernels.c"],
    extra_compile_args=["-O3", "-fopenmp", "-Wno-psabi"],
    extra_link_args=["-fopenmp"],
    optional=True,
)])
