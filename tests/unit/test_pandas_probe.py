"""`pandas_probe.defer`: pyarrow builds arrays from Python values without importing pandas,
and once anything imports pandas, pandas objects convert as they do without the deferral.
Each case runs in a fresh interpreter (this one has pandas imported already)."""
import subprocess
import sys
import textwrap

import pytest


def run(*parts: str) -> str:
    """The output of a script made of `parts` (each indented as it likes)."""
    script = "\n".join(textwrap.dedent(part) for part in parts)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


CONVERSIONS = """
    import math
    import pandas as pd
    import pyarrow as pa
    categorical = pa.array(pd.Series(pd.Categorical(["a", "b", "a"])))
    stamps = pa.array(pd.Series(pd.to_datetime(["2020-01-01 00:00:00.000000001"])))
    nan = pa.array(pd.Series([1.0, math.nan]), from_pandas=True)
    frame = pa.Table.from_pandas(pd.DataFrame({"k": pd.Categorical(["x"])}), preserve_index=False)
    print(categorical.type, stamps.type, nan.null_count, frame.schema.field("k").type,
          type(pa.scalar(1, pa.timestamp("ns")).as_py()).__name__)
"""


def test_arrays_of_python_values_do_not_import_pandas():
    assert run("""
        import sys
        from cdc_sql import pandas_probe
        pandas_probe.defer()
        import pyarrow as pa
        pa.array([1, None]); pa.Table.from_pylist([{"a": "x"}]); pa.array(["y"], pa.string())
        print("pandas" in sys.modules)
    """) == "False"


def test_pandas_imported_afterwards_converts_as_without_the_deferral():
    deferred = run("""
        import sys
        from cdc_sql import pandas_probe
        pandas_probe.defer()
        import pyarrow as pa
        pa.array([1])
    """, CONVERSIONS, """
        print(type(sys.modules["pandas"].__loader__).__name__,
              [type(f).__name__ for f in sys.meta_path if type(f).__module__ == "cdc_sql.pandas_probe"])
    """).splitlines()
    plain = run(CONVERSIONS)
    assert deferred[0] == plain
    assert plain.startswith("dictionary<values=string, indices=int8, ordered=0> timestamp[ns] 1 ")
    assert deferred[1] == "SourceFileLoader []"  # pandas' own loader; the watch gone


@pytest.mark.parametrize("when", ["before", "after"])
def test_nothing_is_deferred_once_pandas_is_imported(when):
    """pandas imported before `defer` leaves pyarrow alone; a second `defer` adds nothing."""
    assert run(f"""
        import sys
        from cdc_sql import pandas_probe
        {"import pandas" if when == "before" else "pandas_probe.defer(); import pandas"}
        pandas_probe.defer()
        print([type(f).__name__ for f in sys.meta_path
               if type(f).__module__ == "cdc_sql.pandas_probe"])
    """, CONVERSIONS).splitlines() == ["[]", run(CONVERSIONS)]
