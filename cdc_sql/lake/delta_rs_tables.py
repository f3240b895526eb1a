"""The lake's table operations with delta-rs, in this process (lake/tables.py says when)."""
from __future__ import annotations

import functools
import logging
import os
import threading
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator

import pyarrow as pa

from cdc_sql.lake import delta_log, parquet_files, tables
from cdc_sql.lake.delta_log import (WRITES_FEATURES, commit_file as _commit_file,
                                    identity as _identity)
from cdc_sql.lake.tables import (COMMIT_RETRIES, EVOLVE_MARK, OWN_MERGE, append_with_delta_rs,
                                 literal, operation, new_table_configuration, predicate,
                                 stats_configuration, writer_properties)
from cdc_sql.location import Location

log = logging.getLogger("cdc_sql")


def _add_actions(table) -> pa.Table:
    """The table's add actions, statistics flattened (through the Arrow stream interface:
    an order of magnitude faster than `pa.table` on delta-rs's own Arrow object)."""
    return pa.RecordBatchReader.from_stream(table.get_add_actions(flatten=True)).read_all()


def _marked():
    from deltalake import CommitProperties

    return CommitProperties(custom_metadata={"userMetadata": EVOLVE_MARK})


def _ntz(arrow_type: pa.DataType) -> bool:
    return pa.types.is_timestamp(arrow_type) and arrow_type.tz is None


def _df_quote(name: str) -> str:
    """An identifier in delta-rs (DataFusion) SQL."""
    return '"' + name.replace('"', '""') + '"'


def _commits(method):
    """A change to the table at `path` (the method's first argument): within `pinned`, this
    thread looks at that table's log again at its next read."""
    @functools.wraps(method)
    def changing(self, path, *args, **kwargs):
        try:
            return method(self, path, *args, **kwargs)
        finally:
            self._look_again(path)

    return changing


class DeltaRsWrites:
    """DeltaRsTables' changes to tables: creating, appending, reshaping, deleting, compacting,
    clustering, merging (through its open tables, `_table`). Each is `_commits`."""

    @_commits
    def create_arrow_table(self, path: str, schema: pa.Schema,
                           properties: dict | None = None) -> None:
        """An empty table (TIMESTAMP_NTZ columns declare their feature), opened at its first
        use: a first run makes a changes table for each source table, most of which it never
        writes (half the cost of `DeltaTable.create`, which opens the table it made); a table
        there is left as it is (delta-rs's own check: no request of ours besides)."""
        from deltalake import Schema
        from deltalake.transaction import create_table_with_add_actions

        create_table_with_add_actions(str(path), Schema.from_arrow(schema), [], mode="ignore",
                                      configuration=new_table_configuration(schema, properties))

    @_commits
    def append_arrow(self, path: str, batches: Iterable[pa.RecordBatch], schema: pa.Schema,
                     schema_mode: str | None = None) -> None:
        """Rows into a table of the same columns are written by pyarrow and committed
        (lake/parquet_files.py: less CPU than delta-rs's writer for bronze's large change
        commits; in an object store through delta-rs's storage), unless they are a list of
        less than SMALL_APPEND bytes (a state commit, a small table's changes) to a table not
        committed to here (`_writes_here`), for which delta-rs's writer is the quicker.
        Others are written by delta-rs: a list through the open table, a stream opening it
        itself. Figures: docs/performance.md ("Writing bronze")."""
        exists = self.exists(path)
        small = isinstance(batches, list) and sum(b.nbytes for b in batches) < tables.SMALL_APPEND
        if exists and schema_mode is None and (not small or self._writes_here(path)) and \
                self.schema(path) == schema:
            self._append_files(path, batches, schema)
            if small:
                self._pack_if_due(path)
            return
        if not isinstance(batches, list) or not exists:
            if schema_mode == "merge":
                from deltalake import DeltaTable

                self._allow_ntz(DeltaTable(str(path)), schema)
            append_with_delta_rs(path, batches, schema, schema_mode=schema_mode,
                                 configuration=None if exists else stats_configuration(schema))
            return
        with self._table(path) as table:
            if schema_mode == "merge":
                self._allow_ntz(table, schema)
            append_with_delta_rs(table, batches, schema, schema_mode=schema_mode)
        if small:
            self._pack_if_due(path)

    def _pack_if_due(self, path: str) -> None:
        """Every small append adds a file (a run following the binlog appends to bronze and
        state every few seconds, for days), and a table of many small files is slower to
        commit to and to read: after PACK_AFTER small appends from this process, the table's
        small files are bin-packed into files of up to PACKED_FILE_BYTES (an OPTIMIZE commit:
        no row changes). A pack that fails (another writer removed a file meanwhile) is
        tried again at the next append."""
        with self._lock:
            appends = self._small_appends[str(path)] = self._small_appends.get(str(path), 0) + 1
        if not tables.pack_due(appends):
            return
        with self._table(path) as table:
            try:
                table.optimize.compact(target_size=tables.PACKED_FILE_BYTES,
                                       writer_properties=writer_properties())
            except Exception as exc:  # noqa: BLE001 - a conflict: the next append tries again
                log.debug("%s: small files not packed (%s)", path, exc)
                return
        with self._lock:
            self._small_appends[str(path)] = 0

    def _append_files(self, path: str, batches: Iterable[pa.RecordBatch],
                      schema: pa.Schema) -> None:
        """The files written without the table (streams into one table are written side by
        side), then one append commit of them, if any."""
        from deltalake import CommitProperties

        actions = parquet_files.write_files(str(path), schema, batches)
        if actions and not self._commit_here(path, actions, [], None):
            with self._table(path) as table:
                self._commit_aside(path, table, actions, schema,
                                   CommitProperties(max_commit_retries=COMMIT_RETRIES))

    @_commits
    def create_from_streams(self, path: str, schema: pa.Schema,
                            streams: list[Callable[[], Iterable[pa.RecordBatch]]],
                            properties: dict | None = None) -> None:
        """Create the table with the rows of `streams` (each opened when called), in one
        commit, written in parallel by pyarrow (lake/parquet_files.py; in an object store
        through delta-rs's storage). `properties`: the table's own (config/layout.py), in the
        creating commit."""
        configuration = new_table_configuration(schema, properties)
        actions = parquet_files.create_table(str(path), schema, streams,
                                             configuration=configuration)
        if Location.of(path).local and "delta.columnMapping.mode" not in (configuration or {}):
            self._made[str(path)] = (hash(_identity(_commit_file(path, 0))),  # its rows: its
                                     [a.path for a in actions])  # files'

    @_commits
    def create_with_files(self, path: str, schema: pa.Schema, actions: list,
                          properties: dict | None = None) -> None:
        """Create the local table in one commit of Parquet files already in its directory
        (`actions`: their delta-rs add actions)."""
        parquet_files.create_with(str(path), schema, actions,
                                  configuration=new_table_configuration(schema, properties))

    def properties(self, path: str) -> dict[str, str]:
        found = self._log(path)
        if found is not None:
            return found.configuration
        with self._table(path) as table:
            return dict(table.metadata().configuration)

    @_commits
    def set_properties(self, path: str, chosen: dict[str, str]) -> None:
        """Set table properties in one commit (SET TBLPROPERTIES: the rows stay)."""
        with self._table(path) as table:
            table.alter.set_table_properties(chosen, raise_if_not_exists=False)

    @_commits
    def replace_rows(self, path: str, table: pa.Table, schema: pa.Schema, where: str) -> None:
        """The rows matching the SQL condition `where` replaced by `table` (each of whose
        rows matches it) in one commit; rows another writer commits meanwhile that do not
        match it stay."""
        from deltalake import write_deltalake

        write_deltalake(str(path), table, mode="overwrite", predicate=where,
                        writer_properties=writer_properties())

    @_commits
    def reset(self, path: str, schema: pa.Schema) -> None:
        """Empty the table (created if missing), with `schema`, in one marked commit."""
        from deltalake import DeltaTable, write_deltalake

        if not self.exists(path):
            self.create_arrow_table(path, schema)
            return
        self._allow_ntz(DeltaTable(str(path)), schema)
        write_deltalake(str(path), schema.empty_table(), mode="overwrite",
                        schema_mode="overwrite", commit_properties=_marked())

    @_commits
    def add_columns(self, path: str, fields: list) -> None:
        """Add nullable columns (Spark StructFields): an empty mergeSchema append."""
        from deltalake import DeltaTable, write_deltalake
        from pyspark.sql.pandas.types import to_arrow_type

        table = DeltaTable(str(path))
        schema = pa.schema(table.schema().to_arrow())
        for f in fields:
            schema = schema.append(pa.field(f.name, to_arrow_type(f.dataType), True))
        self._allow_ntz(table, schema)
        write_deltalake(str(path), schema.empty_table(), mode="append", schema_mode="merge",
                        commit_properties=_marked())

    @_commits
    def reshape(self, path: str, widen: dict, add: list[tuple],
                partitions: list[str] | None = None) -> None:
        """Rewrite the table in one commit, streaming: columns in `widen` (name -> Spark type)
        cast to it, and columns in `add` ((name, Spark type, column to copy or None)) added;
        partitioned by `partitions` (None: as it was)."""
        from deltalake import DeltaTable, write_deltalake
        from pyspark.sql.pandas.types import to_arrow_type

        table = DeltaTable(str(path))
        dataset = table.to_pyarrow_dataset()
        schema = pa.schema([f.with_type(to_arrow_type(widen[f.name])) if f.name in widen
                            else f for f in dataset.schema])
        for name, data_type, _ in add:
            schema = schema.append(pa.field(name, to_arrow_type(data_type), True))
        self._allow_ntz(table, schema)

        def batches():
            for batch in dataset.to_batches():
                columns = {f.name: batch.column(f.name) for f in dataset.schema}
                for name, data_type, source in add:
                    columns[name] = columns[source] if source else \
                        pa.nulls(batch.num_rows, to_arrow_type(data_type))
                yield pa.RecordBatch.from_arrays(
                    [columns[f.name].cast(f.type) for f in schema], schema=schema)

        write_deltalake(str(path), pa.RecordBatchReader.from_batches(schema, batches()),
                        mode="overwrite", schema_mode="overwrite", commit_properties=_marked(),
                        partition_by=list(table.metadata().partition_columns
                                          if partitions is None else partitions),
                        writer_properties=writer_properties())

    @staticmethod
    def _allow_ntz(table, schema: pa.Schema) -> None:
        """delta-rs writes TIMESTAMP_NTZ columns without declaring the table feature readers
        (Sail) require: declare it first."""
        declared = table.protocol().writer_features or []
        if "timestampNtz" not in declared and any(_ntz(f.type) for f in schema):
            from deltalake import TableFeatures

            table.alter.add_feature(TableFeatures.TimestampWithoutTimezone,
                                    allow_protocol_versions_increase=True,
                                    commit_properties=_marked())

    @_commits
    def delete_rows(self, path: str, where: list[tuple[str, str, str]]) -> None:
        """DELETE the rows matching every (column, operator, value) of `where`."""
        from deltalake import DeltaTable

        DeltaTable(str(path)).delete(predicate(where, _df_quote), commit_properties=_marked())

    @_commits
    def update_rows(self, path: str, values: dict, where: list[tuple[str, str, str]]) -> None:
        """UPDATE columns to values (text, or None for NULL) in rows matching `where`."""
        from deltalake import DeltaTable

        DeltaTable(str(path)).update(
            updates={_df_quote(c): literal(v) for c, v in values.items()},
            predicate=predicate(where, _df_quote), commit_properties=_marked())

    @_commits
    def compact_and_vacuum(self, path: str, retention_hours: float, compact: bool = True) -> dict:
        """Rewrite small files into large ones (unless `compact` is False: a table `cluster`
        just rewrote, whose files a bin-packing would mix again), then delete files no version
        within the retention still needs."""
        from deltalake import DeltaTable

        table = DeltaTable(str(path))
        compacted = table.optimize.compact() if compact else {}
        removed = table.vacuum(retention_hours=int(retention_hours), dry_run=False,
                               enforce_retention_duration=False)
        return {"files_added": compacted.get("numFilesAdded", 0),
                "files_removed": compacted.get("numFilesRemoved", 0),
                "files_vacuumed": len(removed)}

    @_commits
    def cluster(self, path: str, columns: list[str]) -> None:
        """Rewrite the table sorted by `columns` (the key) into files of TARGET_FILE_BYTES, so
        each file holds one key range and a MERGE rewrites only the files of the keys it
        changes (Sail and Delta both skip files no changed key falls in). Rows do not change:
        an OPTIMIZE commit."""
        from deltalake import DeltaTable

        DeltaTable(str(path)).optimize.z_order(  # sorts spill to disk past 512 MB
            columns, target_size=tables.TARGET_FILE_BYTES, max_spill_size=512 * 2**20,
            writer_properties=writer_properties())

    def layout(self, path: str) -> tables.TableLayout | None:
        """The table's properties and partition columns from its log; its clustering columns
        [] from its protocol for a table without Delta's clustering feature (every table
        delta-rs writes): those of one with the feature are the engine's to tell
        (lake.WithFallback and lake.ReadsHere ask it on this error). None: no table there."""
        if not self.exists(path):
            return None
        found = self._log(path)
        if found is not None:  # a log read here: no partitions, no feature delta-rs lacks
            return tables.TableLayout(found.configuration, [], [])
        with self._table(path) as table:
            metadata, protocol = table.metadata(), table.protocol()
        if "clustering" in (protocol.writer_features or ()):
            raise NotImplementedError(f"{path}: liquid-clustered, its columns are the "
                                      f"engine's to tell")
        return tables.TableLayout(dict(metadata.configuration),
                                  list(metadata.partition_columns), [])

    @_commits
    def merge_changes(self, path: str, changes: pa.Table, key: list[str],
                      columns: list[str]) -> None:
        """silver_merge.sql's MERGE of the last change per key (`changes`: `columns` and
        `_cdc_remove`), by delta-rs: offsets only move forward, so a replay changes nothing."""
        on = " AND ".join(f"t.{_df_quote(k)} = s.{_df_quote(k)}" for k in key)
        values = {_df_quote(c): f"s.{_df_quote(c)}" for c in columns}
        with self._table(path) as table:
            table.merge(source=changes, predicate=on, source_alias="s", target_alias="t") \
                .when_matched_delete(predicate="s._cdc_offset > t._cdc_offset AND s._cdc_remove") \
                .when_matched_update(updates=values, predicate="s._cdc_offset > t._cdc_offset") \
                .when_not_matched_insert(updates=values, predicate="NOT s._cdc_remove") \
                .execute()


class _Open:
    """A table `DeltaRsTables._table` keeps open: its lock, the DeltaTable (None until opened)
    and, on a local path, the version it was last known to be the latest at with the identity
    of that version's commit file. Bringing an open table up to date lists its log (0.3-1 ms;
    a run of many small tables did it a few times a table); on a local path two looks at
    files answer the same: the table is at its latest when that commit file is still the very
    one seen then and the next version's does not exist (Delta's versions follow one another,
    each a commit file; a checkpoint adds files beside them). A table removed and made again
    has new commit files: it is opened anew (delta-rs's listing looks only for versions after
    the open one, and would miss it). `log`: the table as read from its log's files
    (delta_log.py), False when it is not read so."""

    def __init__(self):
        self.lock = threading.Lock()
        self.table = None
        self._seen: tuple[int, tuple] | None = None
        self.aside = False  # committed by `create_write_transaction` in the current use
        self.log: delta_log.Snapshot | None | bool = None

    def latest_version(self, path: str) -> int | None:
        """The table's latest version, counted by its commit files from the open table's on
        (a commit of `create_write_transaction` does not move the open table); None when
        not known so."""
        if self._as_seen(path) != "same":
            return None
        version = self._seen[0]
        while os.path.exists(_commit_file(path, version + 1)):
            version += 1
        return version

    def state(self, path: str) -> str:
        """"latest" when the open table is known to be at the table's latest version,
        "remade" when the commit file of its version is not the one seen (the table was
        removed and made again: open it anew), else "unknown" (bring it up to date)."""
        found = self._as_seen(path)
        if found != "same":
            return found
        return "unknown" if os.path.exists(_commit_file(path, self._seen[0] + 1)) else "latest"

    def _as_seen(self, path: str) -> str:
        """"same" when the open table is at the version seen last and that version's commit
        file is still the one seen then, "remade" when the file is not, else "unknown"."""
        if self._seen is None or self._seen[0] != self.table.version():
            return "unknown"
        version, identity = self._seen
        return "same" if _identity(_commit_file(path, version)) == identity else "remade"

    def bring_up(self, path: str) -> None:
        """The open table brought to the table's latest version; dropped (to be opened anew)
        when the table was made again or cannot be brought up."""
        state = self.state(path)
        if state == "remade":
            self.table = None
        elif state == "unknown":
            try:
                self.table.update_incremental()
                self.saw(path, self.table.version())
            except Exception:  # noqa: BLE001 - replaced (recreated, vacuumed): open anew
                self.table = None

    def saw(self, path: str, version: int) -> None:
        """The open table was brought to `version`, the latest then."""
        identity = _identity(_commit_file(path, version)) if Location.of(path).local else None
        self._seen = None if identity is None else (version, identity)

    def committed(self, path: str, before: int) -> None:
        """After a use of the open table that was at its latest version `before` there: a
        commit of its own (its version one more) leaves it at the latest still; a commit
        retried after another writer's (two more) does not count."""
        if self._seen is not None and self._seen[0] == before and \
                self.table.version() == before + 1:
            self.saw(path, before + 1)


WHOLE_FILE_BYTES = 8 * 2**20  # read whole (quicker), then filtered; larger ones a batch at a time


def _parts(file: str, size: int, columns: list[str]) -> Iterator[pa.Table]:
    """A local Parquet file's columns, whole if it is small (read into memory first if it is
    very small: `parquet_files.in_memory`), else in batches (a file only partly in a window is
    not held whole beside its rows in the window)."""
    import pyarrow.fs
    import pyarrow.parquet as pq

    if size <= parquet_files.SMALL_FILE:
        yield parquet_files.in_memory(pyarrow.fs.LocalFileSystem(), file).read(
            columns=columns, use_threads=False)
        return
    parquet = pq.ParquetFile(file)
    if size <= WHOLE_FILE_BYTES:
        yield parquet.read(columns=columns)
        return
    for batch in parquet.iter_batches(batch_size=64 * 1024, columns=columns):
        yield pa.Table.from_batches([batch])


def version_files(path: str, version: int) -> tuple[list[str], str] | None:
    """The data files of a table's version and its schema (Delta's JSON), as delta-rs reads
    them from the log; None where those files alone are not the version's rows (deletion
    vectors, mapped columns, partitions)."""
    from deltalake import DeltaTable

    table = DeltaTable(str(path), version=int(version))
    if not delta_log.open_rows_are_files(table):
        return None
    return table.file_uris(), table.schema().to_json()


def _files_hold_rows(path: str, table) -> bool:
    """Whether the open local table's rows are those of its files, read as they are: no
    partition values, deletion vectors or mapped column names."""
    return Location.of(path).local and delta_log.open_rows_are_files(table)


class DeltaRsTables(DeltaRsWrites):
    """Table operations with delta-rs, in this process. Tables stay open between operations
    (opening one replays its log: half of a state commit); a stream of batches opens its
    table for itself, so that streams into one table are written side by side."""

    def __init__(self):
        self._open_tables: dict[str, _Open] = {}
        # tables created here with their rows: the creating commit's identity (hashed: its
        # first bytes are kilobytes a table), its files
        self._made: dict[str, tuple[int, list[str]]] = {}
        self._lock = threading.Lock()
        self._local = threading.local()  # .refreshed, .looked: the paths `pinned` brought up
        # to date, as open tables and as read from their logs
        # (path, columns) -> (schema, {data file: its rows}): `read_arrow(each_file_once=True)`
        self._files_read: dict[tuple, tuple[pa.Schema, dict[str, pa.Table]]] = {}
        self._small_appends: dict[str, int] = {}  # path -> small appends since its last pack

    @contextmanager
    def pinned(self):
        """Within it, this thread brings each table up to date once, at its first use: for
        work that reads the same tables several times and alone writes them (through these
        open tables, which follow their own commits). So with a table read from its log
        (`_log`), looked at again only after a change made here (`_commits`): a merge of a
        small table looked at silver's and bronze's logs 22 times. Within another, it is
        that one."""
        if getattr(self._local, "refreshed", None) is not None:
            yield
            return
        self._local.refreshed, self._local.looked = set(), set()
        try:
            yield
        finally:
            self._local.refreshed = self._local.looked = None

    @contextmanager
    def _table(self, path: str):
        """The table at `path`, brought up to its latest version, used by one thread at once."""
        from deltalake import DeltaTable

        with self._lock:
            entry = self._open_tables.setdefault(str(path), _Open())
        refreshed = getattr(self._local, "refreshed", None)
        with entry.lock:
            if entry.table is not None and (refreshed is None or str(path) not in refreshed):
                entry.bring_up(str(path))
            if entry.table is None:
                entry.table = DeltaTable(str(path))
                entry.saw(str(path), entry.table.version())
            if refreshed is not None:
                refreshed.add(str(path))
            before = entry.table.version()
            yield entry.table
            entry.committed(str(path), before)
            if entry.aside:  # a commit the open table does not follow: seen at the next use
                entry.aside = False
                if refreshed is not None:
                    refreshed.discard(str(path))

    def _commit_aside(self, path: str, table, actions: list, schema: pa.Schema,
                      properties) -> None:
        """An append commit of `actions` by delta-rs's `create_write_transaction`, which
        leaves the open `table` where it was: its next use, `pinned` or not, brings it up."""
        table.create_write_transaction(actions, "append", schema, commit_properties=properties)
        self._open_tables[str(path)].aside = True

    def _log(self, path: str) -> delta_log.Snapshot | None:
        """The local table as read from its log's files (delta_log.py), at its latest version;
        None for a table read by delta-rs (a table found not to be read so stays delta-rs's in
        this process)."""
        if not Location.of(path).local:
            return None
        with self._lock:
            entry = self._open_tables.setdefault(str(path), _Open())
        looked = getattr(self._local, "looked", None)
        with entry.lock:
            if entry.log is False:
                return None
            if looked is not None and str(path) in looked:
                return entry.log
            found = delta_log.read(str(path), entry.log or None)
            entry.log = found if found is not None or not self.exists(path) else False
            if looked is not None and found is not None:
                looked.add(str(path))
            return found

    def _look_again(self, path: str) -> None:
        """Within `pinned`, the table's log is looked at again at its next read (`_commits`)."""
        looked = getattr(self._local, "looked", None)
        if looked is not None:
            looked.discard(str(path))

    def _writes_here(self, path: str) -> bool:
        """Whether files written here are committed to the table here (`_commit_here`)."""
        found = self._log(path)
        return found is not None and found.writable()

    def _commit_here(self, path: str, added: list, removed: list[str],
                     mark: str | None) -> bool:
        """Commit files already in a local table's directory (delta_log.commit) to a table
        read from its log; then, as delta-rs after a commit of its own, a checkpoint when the
        version asks for one. False, nothing done, for a table delta-rs commits to, or when
        another writer took the version (delta-rs's commit then resolves it)."""
        found = self._log(path)
        if found is None or not found.writable() or \
                not delta_log.commit(found, added, removed, mark):
            return False
        refreshed = getattr(self._local, "refreshed", None)
        if refreshed is not None:  # an open DeltaTable brings itself up at its next use
            refreshed.discard(str(path))
        if delta_log.checkpoint_due(found, found.version + 1):
            with self._table(path) as table:
                table.create_checkpoint()
                table.cleanup_metadata()
        return True

    def exists(self, path: str) -> bool:
        if Location.of(path).local:
            return os.path.isdir(os.path.join(str(path), "_delta_log"))
        from cdc_sql.lake import objects

        return objects.has_delta_log(str(path))

    def table_id(self, path: str) -> str:
        """The table's id (Delta's metaData.id, drawn when it was created)."""
        found = self._log(path)
        if found is not None:
            return found.table_id
        with self._table(path) as table:
            return str(table.metadata().id)

    def version(self, path: str) -> int | None:
        found = self._log(path)
        if found is not None:
            return found.version
        entry = self._open_tables.get(str(path))
        if entry is not None:
            with entry.lock:
                found = None if entry.table is None else entry.latest_version(str(path))
            if found is not None:
                return found
        with self._table(path) as table:
            return table.version()

    def history(self, path: str, after_version: int) -> list[tuple[int, str, str]] | None:
        found = self._log(path)
        commits = None if found is None else delta_log.history(found, after_version)
        if commits is None:
            with self._table(path) as table:
                count = table.version() - after_version
                commits = [(int(c["version"]), c) for c in
                           (table.history(count) if count > 0 else [])]
        return sorted((version, operation(c.get("operation"), c.get("operationParameters"),
                                          c.get("userMetadata")),
                       str((c.get("operationParameters") or {}).get("version", "")))
                      for version, c in commits if version > after_version)

    def schema(self, path: str) -> pa.Schema:
        found = self._log(path)
        if found is not None:
            return found.schema()
        with self._table(path) as table:
            return pa.schema(table.schema().to_arrow())

    def read_arrow(self, path: str, columns: list[str] | None = None,
                   where: list[tuple[str, str, object]] | None = None,
                   each_file_once: bool = False) -> pa.Table:
        """The table's rows (`where`: (column, operator, value) conditions, files skipped by
        their statistics). `each_file_once`: of a small table read whole several times in a
        process (state), each data file is read once and its rows kept (`_once`)."""
        if each_file_once and not where:
            rows = self._once(path, columns)
            if rows is not None:
                return rows
        with self._table(path) as table:
            return table.to_pyarrow_table(columns=columns, filters=where or None)

    def read_within(self, path: str, columns: list[str],
                    within: tuple[str, object, object]) -> pa.Table:
        """The rows with after < column <= upto (`within`: column, after, upto) of the files
        that may hold them by their statistics (`file_bytes`'s). A local table whose rows are
        its files' has them read straight from those files: a small table's window read in a
        third of delta-rs's scan (which builds a dataset of the table first); others, or a
        file without one of the columns, by delta-rs under the same conditions."""
        column, after, upto = within
        found = self._plain(path, column)
        if found is not None:
            whole, files = found
            schema = pa.schema([whole.field(c) for c in columns])
            try:
                parts = [_within_rows(part.cast(schema), within)
                         for name, size, _ in _within(files, after, upto) for part in _parts(
                             os.path.join(str(Location.of(path)), name), size, columns)]
            except (KeyError, ValueError, OSError, pa.ArrowException):
                parts = None  # a file without one of the columns: read as ever
            if parts is not None:
                return pa.concat_tables(parts) if parts else schema.empty_table()
        with self._table(path) as table:
            return table.to_pyarrow_table(columns=columns,
                                          filters=tables.within_conditions(within))

    def _plain(self, path: str, column: str | None) -> tuple[pa.Schema, list[tuple]] | None:
        """The schema and `_file_list` (with the bounds of `column`) of a local table whose
        rows are its files' (`_files_hold_rows`): from its log's files when read here, else
        from delta-rs; None for any other table."""
        found = self._log(path)
        files = None if found is None else found.file_list(column)
        if files is not None:
            return found.schema(), files
        with self._table(path) as table:
            if not _files_hold_rows(path, table):
                return None
            return pa.schema(table.schema().to_arrow()), _file_list(_add_actions(table), column)

    def _once(self, path: str, columns: list[str] | None) -> pa.Table | None:
        """The rows of a local table whose rows are its files' (no partition values, deletion
        vectors or mapped column names), each file's rows read once in this process: Delta
        never changes a data file, so a version's rows are those of the files its log lists,
        and a file read earlier need not be read again (a run loads state five times or
        more; each load read every file: docs/performance.md, "Fixed costs of a run").
        None when the table is not such a one, or a file does not hold the columns."""
        import pyarrow.parquet as pq

        found = self._plain(path, None)
        if found is None:
            return None
        whole, listed = found
        schema = pa.schema([whole.field(c) for c in columns]) if columns else whole
        key = (str(path), tuple(columns or ()))
        with self._lock:
            kept_schema, kept = self._files_read.get(key, (schema, {}))
        kept = kept if kept_schema == schema else {}
        root = str(Location.of(path))
        try:
            files = {name: kept[name] if name in kept else
                     pq.ParquetFile(os.path.join(root, name)).read(columns=columns).cast(schema)
                     for name, *_ in listed}
        except (KeyError, ValueError, OSError, pa.ArrowException):  # a file without a column
            return None  # of them, or one not where the log says: read as ever
        with self._lock:
            self._files_read[key] = (schema, files)  # the files of this version only
        return pa.concat_tables(files.values()) if files else schema.empty_table()

    def scan(self, path: str, columns: list[str], where: list[tuple[str, str, object]],
             serial: bool = False) -> pa.RecordBatchReader:
        """The rows of `read_arrow` as a stream (memory follows a few batches: the defaults
        read 16 batches of 128k rows ahead of a slower consumer), opened now:
        a delta-rs call from inside another delta-rs write (a stream it consumes) panics.
        `serial`: decoded by the consuming thread, nothing read ahead (with threads, a
        consumer slower than the decode saw 400 MB of batches pile up)."""
        import pyarrow.parquet as pq

        options = {}
        with self._table(path) as table:
            if Location.of(path).local:  # pyarrow's own file system reads faster than delta-rs's
                from pyarrow.dataset import ParquetFragmentScanOptions
                from pyarrow.fs import LocalFileSystem, SubTreeFileSystem

                dataset = table.to_pyarrow_dataset(
                    filesystem=SubTreeFileSystem(str(path), LocalFileSystem()))
                # no coalesced read-ahead of row groups on a local disk: far less memory, no
                # slower (docs/performance.md, "Measurements behind the code")
                options["fragment_scan_options"] = ParquetFragmentScanOptions(pre_buffer=False)
            else:
                dataset = table.to_pyarrow_dataset()
        condition = pq.filters_to_expression(
            [(c, "in" if op == "IN" else op, v) for c, op, v in where])
        return dataset.scanner(columns=columns, filter=condition, batch_size=64 * 1024,
                               batch_readahead=2, fragment_readahead=1, use_threads=not serial,
                               **options).to_reader()

    def key_ranges(self, path: str, column: str) -> list[tuple] | None:
        """(min, max, bytes) of `column` in each file, from the Delta log's statistics; None
        when a file has none."""
        files = [(low, high, size) for _, size, _, low, high in self._files(path, column)]
        return None if any(low is None or high is None for low, high, _ in files) else files

    def merges_here(self, path: str) -> bool:
        """Whether delta-rs may MERGE into the table: no feature it cannot write (deletion
        vectors, column mapping, ...: a table an engine created with its own defaults); a
        table not there yet delta-rs creates."""
        return not self.unwritable(path)

    def unwritable(self, path: str) -> list[str]:
        """What about the table delta-rs cannot write: its table features outside the few it
        writes, an older protocol past its versions, or append-only; [] for a table not there
        yet (delta-rs creates it)."""
        if not self.exists(path):
            return []
        found = self._log(path)
        if found is not None:
            protocol = found.protocol
            return _unwritable(protocol.get("readerFeatures"), protocol.get("writerFeatures"),
                               protocol.get("minReaderVersion", 1),
                               protocol.get("minWriterVersion", 2), found.configuration)
        with self._table(path) as table:
            protocol = table.protocol()
            configuration = table.metadata().configuration
        return _unwritable(protocol.reader_features, protocol.writer_features,
                           protocol.min_reader_version, protocol.min_writer_version,
                           configuration)

    def file_bytes(self, path: str, within: tuple[str, str, str] | None = None) -> int:
        """Bytes of the table's data files; `within` (column, after, upto): only of the files
        that may hold rows with after < column <= upto by their statistics (a file without
        statistics on the column counts)."""
        return sum(size for _, size, _ in self._files_within(path, within))

    def file_rows(self, path: str, within: tuple[str, str, str] | None = None) -> int:
        """Rows of the files `file_bytes` counts (from the Delta log's statistics)."""
        return sum(rows or 0 for _, _, rows in self._files_within(path, within))

    def _files_within(self, path: str, within: tuple[str, str, str] | None) -> list[tuple]:
        """(path, bytes, rows) of the files of `file_bytes`."""
        column, after, upto = within or (None, None, None)
        return _within(self._files(path, column), after, upto)

    def plain_files(self, path: str) -> list[str] | None:
        """The data files (paths relative to the table) of a local table whose rows are its
        files' (`_files_hold_rows`); None for any other. A table this process created with
        its rows, still at that first version, is not opened: its files are those it made
        (a first run reads each small table's files so, a table opened costing a millisecond)."""
        identity, names = self._made.get(str(path), (None, None))
        if identity is not None and hash(_identity(_commit_file(path, 0))) == identity and \
                not os.path.exists(_commit_file(path, 1)):
            return names
        found = self._plain(path, None)
        return None if found is None else [name for name, *_ in found[1]]

    def data_files(self, path: str, column: str) -> list[tuple[str, object, object]]:
        """(path relative to the table, min, max of `column`) of each data file of a local,
        unpartitioned table; None where the Delta log has no bound."""
        return [(name, low, high) for name, _, _, low, high in self._files(path, column)]

    def _files(self, path: str, column: str | None) -> list[tuple]:
        """(path relative to the table, bytes, rows, min and max of `column`) of each data
        file, from the Delta log; None where it has no statistics."""
        found = self._log(path)
        files = None if found is None else found.file_list(column)
        if files is not None:
            return files
        with self._table(path) as table:
            actions = _add_actions(table)
        return _file_list(actions, column)

    @_commits
    def replace_files(self, path: str, removed: list[str], added: list,
                      schema: pa.Schema) -> None:
        """One commit removing files (relative paths) and adding others already in the
        table's directory (`added`: their add actions), marked as cdc-sql's MERGE (the
        hand-change check lets it pass, as a MERGE of ours)."""
        import time

        from deltalake import CommitProperties
        from deltalake.transaction import RemoveAction

        if self._commit_here(path, added, removed, OWN_MERGE):
            return
        now = int(time.time() * 1000)
        with self._table(path) as table:
            self._commit_aside(path, table,
                               [*added, *(RemoveAction(name, True, now) for name in removed)],
                               schema, CommitProperties(custom_metadata={"userMetadata": OWN_MERGE}))


def _unwritable(reader_features, writer_features, min_reader: int, min_writer: int,
                configuration: dict) -> list[str]:
    """What of a table's protocol and properties delta-rs cannot write (`unwritable`)."""
    found = sorted(set(reader_features or ()) - {"timestampNtz"} |
                   set(writer_features or ()) - WRITES_FEATURES)
    if min_reader > 3 or min_writer > 7 or (writer_features is None and min_writer > 4):
        found.append(f"protocol {min_reader}/{min_writer}")
    return found + (["appendOnly"] if configuration.get("delta.appendOnly") == "true" else [])


def _file_list(actions: pa.Table, column: str | None) -> list[tuple]:
    """(path, bytes, rows, min and max of `column`) of each file of the add actions."""
    return list(zip(*(actions.column(c).to_pylist() for c in ("path", "size_bytes",
                                                              "num_records")),
                    *_bounds(actions, column)))


def _within_rows(part: pa.Table, within: tuple[str, object, object]) -> pa.Table:
    """The rows of `part` with after < column <= upto (`within`: column, after, upto); none
    where the column is NULL. (Computed, not a filter expression: Arrow plans one, 0.3 ms
    each time, seven times the comparisons' cost for a few rows.)"""
    import pyarrow.compute as pc

    column, after, upto = within
    values = part[column]
    return part.filter(pc.and_(pc.greater(values, after), pc.less_equal(values, upto)))


def _within(files: list[tuple], after, upto) -> list[tuple]:
    """The (path, bytes, rows) of the files of `_file_list` that may hold rows with
    after < column <= upto by their statistics (a file without them may)."""
    return [(name, size, rows) for name, size, rows, low, high in files
            if low is None or high is None or (low <= upto and high > after)]


def _bounds(actions: pa.Table, column: str | None) -> tuple[list, list]:
    """The min and max of `column` in each file of the add actions (None: no statistics)."""
    if column is None or f"min.{column}" not in actions.column_names:
        return [None] * actions.num_rows, [None] * actions.num_rows
    return actions.column(f"min.{column}").to_pylist(), actions.column(f"max.{column}").to_pylist()
