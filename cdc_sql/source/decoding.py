"""Rows events decoded on worker threads, in the order they were read.

The compiled decoder lets go of Python's lock while it decodes, so the events of a batch are
decoded by a pool of threads while the reader goes on framing the stream: the reader puts each
rows event in the open *segment*, and once a segment holds SEGMENT_BYTES of events a worker
decodes it, into builders of its own. The reader still knows how many row changes it holds
without waiting: `count()` locates each row's fields and compares its keys, decoding no value,
so batches and parts close exactly where decoding in the reader would close them. `take()`
waits for every segment and gives them back in the order read (the binlog's). At most
2 x WORKERS segments wait undecoded, so memory follows the pool, not the stream.

Without the compiled decoder the reference decodes in the reader itself: it holds the lock.
"""
from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor

from cdc_sql.source.rows import DecodeError

SEGMENT_BYTES = 1 << 20
WORKERS = min(8, os.cpu_count() or 1)


class EventError(Exception):
    """A rows event a worker could not decode: where it was read, and why."""

    def __init__(self, decoder, file: str, pos: int, error: DecodeError):
        super().__init__(str(error))
        self.decoder, self.file, self.pos, self.error = decoder, file, pos, error


class Segment:
    """Rows events to decode, and the builders (one per table) they are decoded into."""

    def __init__(self):
        self.events: list[tuple] = []
        self.builders: dict[object, object] = {}  # TableDecoder -> builder, in order met
        self.nbytes = 0

    def decode(self) -> "Segment":
        for builder, body, start, op, seq, pos, timestamp, txn, file in self.events:
            try:
                builder.add(body, start, op, seq, pos, timestamp, txn)
            except DecodeError as exc:
                raise EventError(builder.decoder, file, pos, exc) from None
        self.events = []  # the event bytes go as soon as they are decoded
        return self


class Decoding:
    """The rows events of one batch (or part), decoded in order; `new_builder(decoder)` gives
    an empty builder for a table. `parallel`: decode on worker threads (the compiled
    decoder); otherwise in the caller, as each event is added."""

    def __init__(self, new_builder, parallel: bool, workers: int = WORKERS):
        self._new_builder, self.parallel = new_builder, parallel
        self._pool = ThreadPoolExecutor(workers, "decode") if parallel else None
        self._waiting = 2 * workers
        self._counters: dict[object, object] = {}  # TableDecoder -> builder that only counts
        self._decoding: list[Future] = []
        self._done = 0  # segments known decoded, from the first
        self._open = Segment()
        self.rows = 0    # row changes held (decoded or counted)
        self.nbytes = 0  # bytes of row images held
        self.tables: set = set()  # the TableDecoders of the rows held

    def add(self, decoder, body, start: int, op: str, seq: int, pos: int, timestamp: int,
            txn: int, file: str) -> None:
        """One rows event of `decoder`'s table. Raises DecodeError for an event whose rows
        cannot be located (inline: decoded); a value a worker cannot decode surfaces in take()."""
        segment = self._open
        self.tables.add(decoder)
        builder = segment.builders.get(decoder)
        if builder is None:
            builder = segment.builders[decoder] = self._new_builder(decoder)
        if not self.parallel:
            self.rows += builder.add(body, start, op, seq, pos, timestamp, txn)
        else:
            counter = self._counters.get(decoder)
            if counter is None:
                counter = self._counters[decoder] = self._new_builder(decoder)
            self.rows += counter.count(body, start, op)
            segment.events.append((builder, body, start, op, seq, pos, timestamp, txn, file))
        size = len(body) - start
        self.nbytes += size
        segment.nbytes += size
        if self.parallel and segment.nbytes >= SEGMENT_BYTES:
            self._submit()

    def take(self) -> list[Segment]:
        """Every segment since the last take(), decoded, in the order read; raises EventError
        (after every worker finished) for the first event that could not be decoded."""
        if self.parallel:
            if self._open.events:
                self._submit()
            segments, failed = [], None
            for future in self._decoding:
                try:
                    segments.append(future.result())
                except EventError as exc:
                    failed = failed or exc
            self._decoding, self._done = [], 0
            self._open = Segment()
            if failed:
                raise failed
        else:
            segments, self._open = [self._open], Segment()
        self.rows = self.nbytes = 0
        self.tables = set()
        return segments

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def _submit(self) -> None:
        segment, self._open = self._open, Segment()
        self._decoding.append(self._pool.submit(segment.decode))
        while len(self._decoding) - self._done > self._waiting:  # the reader waits for them
            self._decoding[self._done].exception()
            self._done += 1
