"""The binlog reader's transactions: their boundaries, and prepared XA transactions held back
until their XA COMMIT (source/binlog.py)."""
from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field

import pyarrow as pa

from cdc_sql.errors import SourceError
from cdc_sql.source import binlog_events as ev
from cdc_sql.source.offsets import Offset, Position
from cdc_sql.source.rows import DecodeError

log = logging.getLogger("cdc_sql.source.binlog")
_UTC = dt.timezone.utc

XA_MAX_CHANGES = 10**6 - 1  # row changes of one XA transaction: an offset's row index


@dataclass
class Held:
    """A prepared XA transaction: where its events begin, and, once read, the table maps and
    rows events of captured tables in it (raw), landed at its XA COMMIT."""

    start: Position
    gtid: str = ""
    events: list[tuple[int, bytes, int]] = field(default_factory=list)  # (type, body, time)


def at_commit(batches: dict, seq: int, pos: int, xid: str) -> dict:
    """A committed XA transaction's change rows (decoded with offsets in the order written:
    event number, row) moved to its commit: (seq, pos, n), n counting its row changes across
    its tables in that order (the two halves of a key-changing update share theirs)."""
    written = sorted({o for b in batches.values() for o in b.column("_cdc_offset").to_pylist()})
    if len(written) > XA_MAX_CHANGES:
        raise SourceError(f"XA transaction {xid} committed at binlog file {seq}, position {pos} "
                          f"holds {len(written)} row changes; cdc-sql places at most "
                          f"{XA_MAX_CHANGES:,} at one commit (the row index of an offset): "
                          f"re-snapshot its tables")
    number = {offset: Offset(seq, pos, n).text for n, offset in enumerate(written)}
    out = {}
    for key, batch in batches.items():
        at = batch.schema.get_field_index("_cdc_offset")
        offsets = pa.array([number[o] for o in batch.column(at).to_pylist()], pa.string())
        out[key] = batch.set_column(at, "_cdc_offset", offsets)
    return out


class XaEvents:
    """BinlogReader's transaction boundaries and XA transactions."""

    @property
    def held_state(self) -> dict[str, dict]:
        """The prepared XA transactions held back, as state records them."""
        return {xid: {"start": str(h.start), "gtid": h.gtid} for xid, h in self.held.items()}

    def _begin(self, gtid: str, event) -> None:
        self._gtid = gtid
        self.in_transaction = True
        self._txn_gtid = None
        self._standalone = False
        self._txn_start = self._event_start
        self._txn_from = (self.pending_rows, self.pending_bytes)

    def _commit(self, event) -> str:
        self.in_transaction = False
        self._standalone = False
        self._xa = None
        self.position = self.event_position
        self.source_time = dt.datetime.fromtimestamp(event.timestamp, _UTC).isoformat()
        if self._txn_gtid is not None:
            self.gtid_state = self.gtid_state.advanced(self._txn_gtid)
            self._txn_gtid = None
        return "txn"

    def _xa_prepare(self, event) -> str:
        """XA PREPARE ends the prepared part of an XA transaction: its rows are held (one
        phase: committed here)."""
        one_phase, xid = ev.parse_xa_prepare(event.body)
        held = self._xa or Held(self._txn_start, self._gtid)
        if one_phase:
            self._xa_commit(held, xid, event)
        else:
            self.held[xid] = held
            log.info("binlog: XA transaction %s prepared at %s: held back until it commits",
                     xid, held.start)
        return self._commit(event)

    def _xa_commit(self, held: Held | None, xid: str, event) -> None:
        """A prepared XA transaction's rows, landed at its XA COMMIT: all at the commit event's
        last byte (inside the committing transaction, so before the boundary after it), one
        row index per change in the order written. The commit is the transaction's place in
        commit order; a row it changed was locked from its change to the commit, so no other
        transaction changed it in between."""
        if held is None:
            self._bypass(sorted(self.tables), f"XA COMMIT of {xid}, prepared before capture "
                                              f"began: its rows were never read")
            return
        seq, pos = self._seq(), event.log_pos - 1
        if not self._gtids or self._gtids[-1] != self._gtid:
            self._gtids.append(self._gtid)
        maps, builders = {}, {}
        for order, (type_, body, _) in enumerate(held.events):
            view = memoryview(body)
            if type_ == ev.TABLE_MAP:
                maps[ev.table_id(view)] = self._decoder_of(view, Offset(seq, pos, 0))
                continue
            header = ev.parse_rows_header(view, type_)
            decoder = maps.get(header.table_id)
            skip = self.skip.get((decoder.db, decoder.table)) if decoder else None
            if decoder is None or skip is not None and (seq, pos) <= (skip.file_seq, skip.pos):
                continue
            if header.op != "c" and header.flags & ev.NO_FOREIGN_KEY_CHECKS:
                self._no_fk_checks(decoder, event, seq, pos)
            builder = builders.get(decoder) or builders.setdefault(
                decoder, self._new_builder(decoder))
            try:
                builder.add(view, header.start, header.op, 0, order, event.timestamp,
                            len(self._gtids) - 1)
            except DecodeError as exc:
                raise self._undecodable(decoder, self._file, pos, exc) from None
        finished = {(d.db, d.table): b.finish(self._gtids) for d, b in builders.items()
                    if b.rows}
        for key, batch in at_commit(finished, seq, pos, xid).items():
            self._xa_batches.setdefault(key, []).append(batch)
            self._xa_rows += batch.num_rows

    def _replaying(self, event) -> bool:
        """On a resume with prepared XA transactions held: events before the recorded
        position are read again only for those transactions' table maps and rows. False
        from the first event past it (read as usual from there)."""
        t = event.type
        if t == ev.ROTATE:
            self._file = ev.parse_rotate(event.body)[0]
            return True
        if not event.log_pos:
            return True
        end = Position(self._file, event.log_pos, self.base)
        if end.offset > self._replay_until.offset:
            return False
        start, self._event_start = self._event_start, end
        if t in ev.MARIADB_COMPRESSED_ROWS:
            event = self._uncompressed(event)
            t = event.type
        if t in (ev.MARIADB_GTID, ev.MYSQL_GTID, ev.MYSQL_ANONYMOUS_GTID):
            self._xa = next((h for h in self.held.values() if h.start == start), None)
        elif self._xa is not None and t == ev.TABLE_MAP:
            self._maps[ev.table_id(event.body)] = self._decoder_of(event.body, end.offset)
            self._xa.events.append((t, bytes(event.body), event.timestamp))
        elif self._xa is not None and t in ev.ROWS_EVENTS:
            if self._maps.get(ev.table_id(event.body)) is not None:
                self._xa.events.append((t, bytes(event.body), event.timestamp))
        elif t == ev.XA_PREPARE:
            self._xa = None
        return True
