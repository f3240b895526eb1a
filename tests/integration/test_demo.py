"""The README's demo command, as a user runs it (minus the setup step)."""
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def test_demo_prints_silver_equal_to_source(tmp_path):
    result = subprocess.run([sys.executable, "-m", "cdc_sql.dev.demo", "--target", str(tmp_path)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    for table in ("customers", "orders", "big_orders"):
        assert f"== silver.{table}:" in result.stdout
    assert result.stdout.count("compared with the source row by row: equal") == 3
