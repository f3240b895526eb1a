"""Rows events decoded on worker threads come back in the order read, counted exactly."""
from __future__ import annotations

import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from cdc_sql.source import decoding
from cdc_sql.source.decoding import Decoding, EventError
from cdc_sql.source.rows import DecodeError


class FakeBuilder:
    """Rows events of one table: each event body is its row count; add() records positions."""

    def __init__(self, decoder):
        self.decoder, self.added, self.rows = decoder, [], 0
        self.threads = set()

    def count(self, body, start, op) -> int:
        return len(body) - start

    def add(self, body, start, op, seq, pos, timestamp, txn) -> int:
        time.sleep(0.0005)  # long enough for later segments to finish first, were it allowed
        if op == "x":
            raise DecodeError(f"cannot decode {pos}")
        self.added.append(pos)
        self.threads.add(threading.current_thread().name)
        self.rows += len(body) - start
        return len(body) - start


events = st.lists(st.tuples(st.sampled_from("ab"), st.integers(1, 40)), max_size=60)


@settings(max_examples=60, deadline=None,  # the patched constant holds for every example
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events, st.integers(1, 3))
def test_workers_give_back_every_table_s_events_in_the_order_read(monkeypatch, read, workers):
    monkeypatch.setattr(decoding, "SEGMENT_BYTES", 50)
    results = []
    for parallel in (True, False):
        d = Decoding(FakeBuilder, parallel=parallel, workers=workers)
        for pos, (table, rows) in enumerate(read):
            d.add(table, b"r" * rows, 0, "c", 1, pos, 0, 0, "binlog.000001")
        held = d.rows
        segments = d.take()
        d.close()
        order = {t: [p for s in segments for b in [s.builders.get(t)] if b for p in b.added]
                 for t in "ab"}
        results.append((held, order))
        assert held == sum(rows for _, rows in read)
        assert d.rows == d.nbytes == 0  # a take() starts empty
    assert results[0] == results[1]
    assert results[0][1] == {t: [p for p, (u, _) in enumerate(read) if u == t] for t in "ab"}


def test_an_event_a_worker_cannot_decode_surfaces_in_take_with_its_place(monkeypatch):
    monkeypatch.setattr(decoding, "SEGMENT_BYTES", 10)
    d = Decoding(FakeBuilder, parallel=True, workers=2)
    for pos in range(40):
        d.add("a", b"r" * 5, 0, "x" if pos in (17, 31) else "c", 1, pos, 0, 0, "binlog.000009")
    with pytest.raises(EventError) as raised:
        d.take()
    d.close()
    assert (raised.value.decoder, raised.value.file, raised.value.pos) == ("a", "binlog.000009", 17)
    assert "cannot decode 17" in str(raised.value)


def test_decoding_runs_on_worker_threads_only_when_parallel(monkeypatch):
    monkeypatch.setattr(decoding, "SEGMENT_BYTES", 10)
    for parallel, expected in ((True, "decode"), (False, "MainThread")):
        d = Decoding(FakeBuilder, parallel=parallel, workers=2)
        for pos in range(10):
            d.add("a", b"r" * 5, 0, "c", 1, pos, 0, 0, "f")
        threads = {name for s in d.take() for b in s.builders.values() for name in b.threads}
        d.close()
        assert threads and all(name.startswith(expected) for name in threads)
