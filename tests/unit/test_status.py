"""Lag arithmetic of `status`, and the Prometheus text of the metrics file."""
import datetime as dt

from cdc_sql.ops.metrics import prometheus
from cdc_sql.source.offsets import Position
from cdc_sql.ops.status import lag_bytes, lag_seconds, render

LOGS = [("binlog.000001", 1000), ("binlog.000002", 5000), ("binlog.000003", 700)]


def test_lag_bytes_spans_binlog_files():
    end = Position("binlog.000003", 700)
    assert lag_bytes(Position("binlog.000003", 700).offset.text, end, LOGS) == 0
    assert lag_bytes(Position("binlog.000003", 300).offset.text, end, LOGS) == 400
    assert lag_bytes(Position("binlog.000002", 4000).offset.text, end, LOGS) == 1000 + 700
    assert lag_bytes(Position("binlog.000001", 4).offset.text, end, LOGS) == 996 + 5000 + 700
    assert lag_bytes(None, end, LOGS) is None


def test_lag_seconds_is_zero_when_caught_up_and_unknown_without_a_time():
    now = dt.datetime(2024, 1, 1, 12, 0, 30, tzinfo=dt.timezone.utc)
    assert lag_seconds(0, None, now) == 0.0
    assert lag_seconds(10, "2024-01-01T12:00:00+00:00", now) == 30.0
    assert lag_seconds(10, None, now) is None
    assert lag_seconds(None, "2024-01-01T12:00:00+00:00", now) is None


def test_render_and_prometheus_show_every_table():
    table = {"name": "orders", "phase": "binlog", "splits_done": 3, "splits_total": 3,
             "snapshot_rows": 2500, "applied_offset": "000003:000000000300:000000",
             "lag_bytes": 2048, "lag_seconds": 12.0}
    text = render({"pipeline": "shop", "source_position": "binlog.000003:700",
                   "captured_position": "binlog.000003:300", "captured_lag_bytes": 400,
                   "tables": [table], "last_run": {"run_id": "r1", "started_at": "t",
                                                   "outcome": "failed", "seconds": 1.5,
                                                   "error": "boom"}})
    assert "orders" in text and "2.0 KB" in text and "3/3" in text and "failed (1.5s): boom" in text
    prom = prometheus({"pipeline": 'sh"op', "outcome": "ok", "seconds": 2.5, "seconds_merge": 1.0,
                       "captured_changes": 7, "batches": [{"phase": "merge", "seconds": 0.5}],
                       "tables": [{"name": "orders", "lag_bytes": 0, "lag_seconds": 0.0}]})
    assert 'cdc_sql_lag_bytes{pipeline="sh\\"op",table="orders"} 0' in prom
    assert 'cdc_sql_phase_seconds{pipeline="sh\\"op",phase="merge"} 1' in prom
    assert 'cdc_sql_commit_seconds_max{pipeline="sh\\"op",phase="merge"} 0.5' in prom
    assert 'cdc_sql_run_ok{pipeline="sh\\"op"} 1' in prom
    assert "# TYPE cdc_sql_captured_changes gauge" in prom
