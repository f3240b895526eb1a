"""Progress of long work: a live bar on a terminal, a log line every few seconds otherwise."""
from __future__ import annotations

import logging
import sys
import threading
import time

log = logging.getLogger("cdc_sql")


class Progress:
    """Splits done/total, rows, rows/s and ETA; safe to update from several reader threads."""

    def __init__(self, phase: str, total: int, stream=None, every: float = 5.0, width: int = 24):
        self.phase, self.total, self.every, self.width = phase, total, every, width
        self.stream = stream if stream is not None else sys.stderr
        self.live = bool(getattr(self.stream, "isatty", lambda: False)())
        self.done = self.rows = 0
        self.started = self._last = time.monotonic()
        self._lock = threading.Lock()

    def add_rows(self, rows: int) -> None:
        with self._lock:
            self.rows += rows
            self._show()

    def split_done(self, count: int = 1) -> None:
        with self._lock:
            self.done += count
            self._show(force=self.done == self.total)

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-6)
        rate = self.rows / elapsed
        eta = f"{elapsed / self.done * (self.total - self.done):.0f}s" if self.done else "?"
        return (f"{self.phase}: {self.done}/{self.total} splits, {self.rows:,} rows, "
                f"{rate:,.0f} rows/s, ETA {eta}")

    def _show(self, force: bool = False) -> None:
        now = time.monotonic()
        if self.live:
            filled = int(self.width * self.done / max(self.total, 1))
            bar = "#" * filled + "-" * (self.width - filled)
            self.stream.write(f"\r[{bar}] {self.line()}   ")
            self.stream.flush()
        elif force or now - self._last >= self.every:
            self._last = now
            log.info(self.line())

    def finish(self) -> None:
        if self.live:
            self.stream.write("\n")
        elapsed = time.monotonic() - self.started
        log.info("%s finished: %d splits, %s rows in %.1fs (%s rows/s)", self.phase, self.done,
                 f"{self.rows:,}", elapsed, f"{self.rows / max(elapsed, 1e-6):,.0f}")
