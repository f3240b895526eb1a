import io
import logging

from cdc_sql.progress import Progress


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_live_bar_on_a_terminal():
    screen = Terminal()
    progress = Progress("snapshot", 4, stream=screen, width=8)
    progress.add_rows(1000)
    progress.split_done()
    assert "\r[##------] snapshot: 1/4 splits, 1,000 rows" in screen.getvalue()
    assert "ETA" in screen.getvalue()


def test_log_lines_otherwise(caplog):
    caplog.set_level(logging.INFO, logger="cdc_sql")
    progress = Progress("snapshot", 2, stream=io.StringIO(), every=3600)
    progress.add_rows(10)          # within the interval: quiet
    assert not caplog.records
    progress.split_done()
    progress.split_done()          # the last split always reports
    progress.finish()
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0].startswith("snapshot: 2/2 splits, 10 rows")
    assert "snapshot finished: 2 splits, 10 rows" in messages[-1]
