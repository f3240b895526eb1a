"""The binlog reader's rows events: table maps, decoders, the rows of captured tables decoded
into Arrow builders, and what they hold handed over as a `Batch` (source/binlog.py)."""
from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
from dataclasses import dataclass, field

import pyarrow as pa
import pymysql

from cdc_sql.errors import SourceError
from cdc_sql.source import binlog_events as ev
from cdc_sql.source import mysql, rowdecode_c, versioning
from cdc_sql.source.charsets import Charsets, ServerConverter
from cdc_sql.source.decoding import EventError
from cdc_sql.source.offsets import Offset, Position
from cdc_sql.source.rows import DecodeError, TableDecoder, table_decoder

_UTC = dt.timezone.utc

# A change that cannot be decoded stops the run before anything of its batch is written: no table
# moves past it, so no table's silver silently skips it.
DECODE_ADVICE = ("The run stops here and no table moves past this change; report it with the "
                 "table's SHOW CREATE TABLE, or remove the table from the pipeline to go on "
                 "without it")


@dataclass(frozen=True)
class CapturedStatement:
    """A row of bronze/_binlog (lake/bronze.py STATEMENTS_SCHEMA): a DDL, TRUNCATE or partition
    statement of a captured table, or where its rows changed with foreign_key_checks=0."""

    offset: str
    db: str
    tbl: str
    op: str                    # ddl, truncate, delete, no_fk_checks
    statement: str
    commit_ts: dt.datetime
    gtid: str | None

    @property
    def table(self) -> str:
        return f"{self.db}.{self.tbl}"


@dataclass
class Batch:
    """What the builders held: Arrow batches per source table (db, table), DDL statements."""

    tables: dict[tuple[str, str], list[pa.RecordBatch]] = field(default_factory=dict)
    statements: list[CapturedStatement] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(b.num_rows for batches in self.tables.values() for b in batches)

    @property
    def touched(self) -> list[tuple[str, str]]:
        return sorted(self.tables)


class RowEvents:
    """BinlogReader's rows events and builders."""

    @property
    def pending_rows(self) -> int:
        return self._decoding.rows + self._xa_rows

    @property
    def pending_bytes(self) -> int:
        return self._decoding.nbytes

    @property
    def pending_tables(self) -> int:
        """The source tables of the row changes held (XA transactions' aside)."""
        return len(self._decoding.tables)

    def _uncompressed(self, event):
        try:
            type_, body = ev.uncompressed_rows(event.type, event.body)
        except ev.EventError as exc:
            raise SourceError(f"cannot read the binlog at {self.event_position}: {exc}") \
                from None
        return dataclasses.replace(event, type=type_, body=memoryview(body))

    def _table_map(self, body) -> None:
        self._maps[ev.table_id(body)] = self._decoder_of(body, self.event_position.offset)

    def _decoder_of(self, body, at: Offset) -> TableDecoder | None:
        """The decoder of a table map's rows; None for a table not captured, or whose changes
        up to a re-snapshot's start are not wanted (`drop`) and `at` is not past it."""
        key = bytes(body[6:])  # all but the table id
        decoder = self._decoders.get(key)
        if decoder is None:
            table_map = ev.parse_table_map(body, self.mariadb)
            source_table = self.tables.get((table_map.db, table_map.table))
            dropped = self.drop.get((table_map.db, table_map.table))
            if source_table is None or dropped is not None and at <= dropped:
                return None
            try:
                with self._cursor() as cur:
                    if self._charsets is None:
                        self._charsets = Charsets.read(cur)
                    decoder = table_decoder(table_map, source_table, self._charsets, cur,
                                            self._converter())
            except DecodeError as exc:
                raise SourceError(f"cannot decode {table_map.db}.{table_map.table} at "
                                  f"{self.event_position}: {exc}. {DECODE_ADVICE}") from None
            self._decoders[key] = decoder
        return decoder

    def _rows(self, event) -> None:
        header = ev.parse_rows_header(event.body, event.type)
        decoder = self._maps.get(header.table_id)
        if decoder is None:
            return
        seq, pos = self._seq(), event.log_pos
        skip = self.skip.get((decoder.db, decoder.table))
        if skip is not None and (seq, pos) <= (skip.file_seq, skip.pos):
            return  # already in bronze
        if header.op != "c" and header.flags & ev.NO_FOREIGN_KEY_CHECKS:
            self._no_fk_checks(decoder, event, seq, pos)
        if not self._gtids or self._gtids[-1] != self._gtid:
            self._gtids.append(self._gtid)
        try:
            self._decoding.add(decoder, event.body, header.start, header.op, seq, pos,
                               event.timestamp, len(self._gtids) - 1, self._file)
        except DecodeError as exc:
            raise self._undecodable(decoder, self._file, pos, exc) from None

    def _undecodable(self, decoder: TableDecoder, file: str, pos: int, exc) -> SourceError:
        return SourceError(f"cannot decode a row of {decoder.qualified} at binlog "
                           f"{Position(file, pos, self.base)}: {exc}. {DECODE_ADVICE}")

    def _no_fk_checks(self, decoder: TableDecoder, event, seq: int, pos: int) -> None:
        """Deletes or updates written with foreign_key_checks=0: InnoDB cascaded nothing, so
        silver must not either (cascades.py). Kept with the statements, by the event's offset."""
        landed = self.skip.get(("", ""))  # statements bronze already holds
        if landed is None or (seq, pos) > (landed.file_seq, landed.pos):
            self._statements.append(CapturedStatement(
                offset=Offset(seq, pos, 0).text, db=decoder.db, tbl=decoder.table,
                op="no_fk_checks", statement="",
                commit_ts=dt.datetime.fromtimestamp(event.timestamp, _UTC), gtid=self._gtid))

    def _new_builder(self, decoder: TableDecoder):
        needs_source = any(c.text is not None and c.text.kind == "server"
                           for c in decoder.columns)
        return rowdecode_c.builder(decoder, self.compiled,
                                   self._converter() if needs_source else None)

    def take(self) -> Batch:
        """Everything decoded since the last take(), as Arrow batches; builders start empty."""
        batch = Batch(statements=self._statements)
        try:
            segments = self._decoding.take()
        except EventError as exc:
            raise self._undecodable(exc.decoder, exc.file, exc.pos, exc.error) from None
        for segment in segments:
            for decoder, builder in segment.builders.items():
                if builder.rows:
                    batch.tables.setdefault((decoder.db, decoder.table), []).append(
                        builder.finish(self._gtids))
        for key, batches in self._xa_batches.items():
            batch.tables.setdefault(key, []).extend(batches)
        self._xa_batches, self._xa_rows, self._txn_from = {}, 0, (0, 0)
        for key, batches in list(batch.tables.items()):
            table = self.tables[key]
            if table.row_end:  # system-versioned: current rows only
                batch.tables[key] = [b for b in (versioning.current_changes(b, table)
                                                 for b in batches) if b.num_rows]
                if not batch.tables[key]:
                    del batch.tables[key]
        self._statements = []
        self._gtids = [self._gtid] if self.in_transaction else []
        return batch

    @contextlib.contextmanager
    def _cursor(self):
        """A cursor on a second connection to the source (charset tables, conversions)."""
        if self._ctl is None:
            self._ctl = mysql.connect(self.source)
        try:
            with self._ctl.cursor() as cur:
                yield cur
        except pymysql.err.MySQLError as exc:  # a lost connection is opened again next time
            with contextlib.suppress(pymysql.err.Error):
                self._ctl.close()
            self._ctl = None
            raise mysql.explain(exc, self.source) from None

    def _converter(self) -> ServerConverter:
        if self._server_converter is None:
            self._server_converter = ServerConverter(self._cursor)
        return self._server_converter
