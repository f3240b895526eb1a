"""The compiled decoders: the binlog's row images (`_rowdecode`) and a snapshot's result rows
(`_resultrows`), built by `pip install`, optional (without a C compiler the pure-Python
reference decoder and connectorx serve; scripts/setup.sh installs gcc and the headers)."""
from setuptools import Extension, setup

FLAGS = ["-O3", "-std=c11", "-Wall", "-Wno-unused-function"]
setup(ext_modules=[Extension(f"cdc_sql.{name}", [f"cdc_sql/{name}.c"], depends=["cdc_sql/_buffers.h"],
                             optional=True, extra_compile_args=FLAGS)
                   for name in ("_rowdecode", "_resultrows")])
