"""The compiled row decoder: built by `pip install`, optional (without a C compiler the
pure-Python reference decoder serves; scripts/setup.sh installs gcc and the headers)."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("cdc_sql._rowdecode", ["cdc_sql/_rowdecode.c"], optional=True,
                             extra_compile_args=["-O3", "-std=c11", "-Wall", "-Wno-unused-function"])])
