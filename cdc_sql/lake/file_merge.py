"""A window MERGEd into silver by rewriting, a few rows at a time, the files its changes touch
(lake/small_merge.py says when: wide rows, a small silver, a window past the memory budget). The
files are read and written through `parquet_files.table_files`: a local disk or an object store
alike.

delta-rs's MERGE (DataFusion) moves rows in batches of 8,192 and holds the files it rewrites
until it knows which changed: with rows of megabytes (LONGTEXT, LONGBLOB, JSON) a batch is a
whole file, held several times over, whatever its Parquet bytes say (values that compress
well: 1.05 GB for a 300 MB table stored in 15 MB; docs/performance.md, "Wide values"). Here the
same MERGE (silver_merge.sql's conditions: a key's last change replaces or removes its row
when its offset is later, and is inserted when silver lacks the key and it is no removal) is
carried out in Arrow:

1. the files whose key range (the first key column's, from the Delta log) holds a changed key
   are read by their key and `_cdc_offset` alone, to find the rows that change;
2. the files where some do are read again a row group at a time (lake/parquet_files.py
   writes them of at most ROW_GROUP_BYTES) and written as they come into new files, kept rows
   and changed rows alike, the inserted rows after them;
3. the new files and the removal of the old ones are one commit, marked as cdc-sql's MERGE
   (tables.OWN_MERGE): silver moves from one transaction boundary to the next at once.

A window past the memory budget is merged in parts (`Rewrite`), one per range of the first
key column (`key_ranges`), all in the one commit; a file reaching across ranges is rewritten
by each part that changes it only within that part's range, and its other rows are written
once the parts are in.

A silver of a few rows (at most WHOLE_ROWS, and WHOLE_BYTES of Parquet and of its values) whose
key columns are integers or strings, given at most WHOLE_ROWS changes, is merged whole
(`_merge_whole`): its files read once, the rows that change found by their keys in Python (a
schema per tenant merges thousands of such tables a run, where a join's and a file's fixed
costs are most of the work), and one file written in place of all of them; the same
conditions, the same commit.

A window replayed after a crash finds no later offset and no missing key: nothing is written,
no commit. Memory: the window's last changes (and, for each file they change, which of its
rows), a row group read and one written; silver's size does not count.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cdc_sql.lake.parquet_files import Files, in_memory, table_files

_SOURCE, _TARGET = "__cdc_source_row", "__cdc_target_row"
WHOLE_ROWS = 4096  # a silver of at most this many rows ...
WHOLE_BYTES = 2**20  # ... and Parquet bytes, and bytes of values (uncompressed), merged whole


def merge(tables, path: str, changes: pa.Table, key: list[str]) -> int:
    """MERGE the last change per key (`changes`: silver's columns and `_cdc_remove`) into
    the Delta table at `path`; the files rewritten (0: nothing changed, no commit)."""
    if changes.num_rows <= WHOLE_ROWS and tables.file_bytes(path) <= WHOLE_BYTES:
        rewritten = _merge_whole(tables, path, changes, key)
        if rewritten is not None:
            return rewritten
    rewrite = Rewrite(tables, path, key)
    rewrite.add(changes)
    return rewrite.commit()


def _merge_whole(tables, path: str, changes: pa.Table, key: list[str]) -> int | None:
    """`merge` of a silver of a few rows: its files read whole, each change's row found by
    its key, and all of them replaced by one file of the rows the MERGE leaves. None when
    silver is not such a one (too many rows or bytes of values, a key column of another type,
    a key held twice): `Rewrite`'s then."""
    schema = tables.schema(path)
    if not all(pa.types.is_integer(schema.field(k).type) or pa.types.is_string(
            schema.field(k).type) or pa.types.is_large_string(schema.field(k).type)
               for k in key):
        return None
    files = table_files(path)
    opened = {name: in_memory(files, name)  # (`merge` saw them within WHOLE_BYTES)
              for name, _, _ in tables.data_files(path, key[0])}
    footers = [p.metadata for p in opened.values()]
    if sum(f.num_rows for f in footers) > WHOLE_ROWS or sum(
            f.row_group(g).total_byte_size for f in footers for g in range(f.num_row_groups)) \
            > WHOLE_BYTES:
        return None
    target = pa.concat_tables([_conformed(parquet.read(columns=[
        n for n in schema.names if n in parquet.schema_arrow.names], use_threads=False), schema)
        for parquet in opened.values()]) if opened else schema.empty_table()
    found = _whole_changes(target, changes, key)
    if found is None:
        return None
    dropped, taken = found
    if not dropped and not taken:
        return 0
    written = Files(path, schema, files)
    kept = target.filter(pa.array([row not in dropped for row in range(target.num_rows)],
                                  pa.bool_()))
    for rows in (kept, _conformed(changes.take(pa.array(taken, pa.int64())), schema)):
        for batch in rows.to_batches():
            written.write(batch)
    tables.replace_files(path, list(opened), written.close(), schema)
    return len(opened)


def _whole_changes(target: pa.Table, changes: pa.Table,
                   key: list[str]) -> tuple[set[int], list[int]] | None:
    """The MERGE's outcome as rows: silver's rows it removes or replaces, and the changes it
    writes (replacing a row with a later change, or inserted where the key is missing), as
    `Rewrite.add` finds them (a NULL key matches nothing; a NULL offset or removal flag is
    no later change, and no row). None when silver holds a key twice. Pure."""
    def keys(table):
        return zip(*(table[k].to_pylist() for k in key))

    at: dict[tuple, int] = {}
    for row, value in enumerate(keys(target)):
        if None not in value:
            if value in at:
                return None
            at[value] = row
    held = target["_cdc_offset"].to_pylist()
    offsets, removes = changes["_cdc_offset"].to_pylist(), changes["_cdc_remove"].to_pylist()
    dropped, taken = set(), []
    for change, value in enumerate(keys(changes)):
        row = at.get(value) if None not in value else None
        if row is not None:
            if offsets[change] is None or held[row] is None or offsets[change] <= held[row]:
                continue
            dropped.add(row)
        if removes[change] is False:
            taken.append(change)
    return dropped, taken


class Rewrite:
    """One MERGE into the Delta table at `path`, carried out in parts (`add`: the last
    changes per key of a part, all within a range of the first key column, and the files
    they may touch) and committed once (`commit`): memory follows a part. A file reaching
    past a part's range is rewritten by that part only within it; the rest of its rows are
    written once every part is in (`finish`)."""

    def __init__(self, tables, path: str, key: list[str]):
        self.tables, self.path, self.key = tables, path, key
        self.schema = tables.schema(path)
        self.files = table_files(path)
        self.removed: dict[str, None] = {}  # the files rewritten (in order, each once)
        self.parted: dict[str, list[tuple]] = {}  # a file rewritten in parts: their ranges
        self.added: list = []

    def add(self, changes: pa.Table, files: list[tuple[str, object, object]] | None = None,
            within: tuple = (None, None)):
        """Merge `changes` into `files` ((name, min, max of the first key column): those of
        the table by default), writing new files; nothing is committed yet. `within`: the
        [start, stop) range of the first key column (None: unbounded) holding every key of
        `changes`."""
        key, schema = self.key, self.schema
        source = pa.table({**{k: changes[k] for k in key}, _SOURCE: _indexes(changes.num_rows)})
        matched = []  # source rows whose key silver holds
        rewritten = []  # (file, its rows' later changes: row in the file, source row, part?)
        for name, low, high in self.tables.data_files(self.path, key[0]) if files is None \
                else files:
            held = _held(source[key[0]], low, high)
            near = source if held is None else source.filter(held)
            if not near.num_rows:
                continue
            # a file reaching past the range: only its row groups that meet it (a key's
            # row groups are known by their statistics: a file is written in key order)
            parquet, part = self._open(name), reaches_past(low, high, *within)
            groups = groups_meeting(_spans(parquet, key[0]), *within) if part else None
            columns = [*key, "_cdc_offset"]  # in silver's types (delta-rs writes string_view)
            narrow = _conformed(_read(parquet, groups, columns),
                                pa.schema([schema.field(c) for c in columns]))
            found = _matches(narrow, near, key)
            matched += found[_SOURCE].chunks
            later = found.filter(_later(found, narrow, changes)).select([_TARGET, _SOURCE])
            if later.num_rows:
                rewritten.append((name, later, part, groups))
        known = pa.chunked_array(matched, pa.int64()).combine_chunks()
        inserted = pc.invert(pc.or_(pc.is_in(source[_SOURCE], value_set=known),
                                    changes["_cdc_remove"]))
        if not rewritten and not pc.any(inserted).as_py():
            return
        written = Files(self.path, schema, self.files)
        for name, later, part, groups in rewritten:
            start = 0  # the file's rows are read in the order the pass above found them
            for batch in _batches(self._open(name), schema, groups):
                inside = _in_ranges(batch[key[0]], [within]) if part else None
                for rows in _merged(batch, _within(later, start, batch.num_rows), changes,
                                    schema, inside):
                    written.write(rows)
                start += batch.num_rows
                # Each row group takes new blocks of the allocator (mimalloc, pyarrow's
                # default) unless the last one's are given back: the process grew by the
                # file's size.
                pa.default_memory_pool().release_unused()
            self.removed[name] = None
            if part:
                self.parted.setdefault(name, []).append(within)
        for batch in _conformed(changes.filter(inserted), schema).to_batches():
            written.write(batch)
        self.added += written.close()

    def finish(self) -> None:
        """Each file rewritten in parts: its rows outside every part's range that rewrote
        it, written as they are."""
        written = Files(self.path, self.schema, self.files)
        for name, ranges in self.parted.items():
            parquet = self._open(name)
            for batch in _batches(parquet, self.schema, groups_outside(
                    _spans(parquet, self.key[0]), ranges)):
                rest = batch.filter(pc.invert(_in_ranges(batch[self.key[0]], ranges)))
                if rest.num_rows:
                    written.write(rest)
                pa.default_memory_pool().release_unused()
        self.parted = {}
        self.added += written.close()

    def commit(self) -> int:
        """The new files and the removal of those they replace, in one commit marked as
        cdc-sql's MERGE; the files rewritten (0: nothing changed, no commit)."""
        self.finish()
        if not self.removed and not self.added:
            return 0
        self.tables.replace_files(self.path, list(self.removed), self.added, self.schema)
        return len(self.removed)

    def abandon(self) -> None:
        """The files written so far removed (none is in the table's log)."""
        for action in self.added:
            self.files.delete_file(action.path)
        self.added = []

    def _open(self, name: str) -> pq.ParquetFile:
        """A file of the table (its name relative to it, as the log has it)."""
        return pq.ParquetFile(self.files.open_input_file(name))


def key_ranges(low: int, high: int, parts: int) -> list[tuple[int | None, int | None]]:
    """[start, stop) ranges of an integer key (None: unbounded) cutting [low, high], where a
    window's keys lie, into about `parts` even ranges (a file reaching across a cut is
    rewritten in parts: Rewrite). Pure."""
    cuts = {low + (high - low + 1) * n // parts for n in range(1, parts)}
    bounds = [None, *sorted(c for c in cuts if low < c <= high), None]
    return list(zip(bounds, bounds[1:]))


def within_range(files: list[tuple[str, object, object]], start: int | None,
                 stop: int | None) -> list[tuple[str, object, object]]:
    """The files (name, min, max) whose key span meets [start, stop)."""
    return [f for f in files if meets(f[1], f[2], start, stop)]


def meets(low, high, start: int | None, stop: int | None) -> bool:
    """Whether a key span [low, high] (None: unknown) may meet [start, stop). Pure."""
    return (stop is None or low is None or low < stop) and \
        (start is None or high is None or high >= start)


def groups_meeting(spans: list[tuple], start: int | None, stop: int | None) -> list[int]:
    """The row groups (by their key spans) that may hold a key in [start, stop). Pure."""
    return [i for i, (low, high) in enumerate(spans) if meets(low, high, start, stop)]


def groups_outside(spans: list[tuple], ranges: list[tuple]) -> list[int]:
    """The row groups (by their key spans) that may hold a key outside every one of
    `ranges`. Pure."""
    return [i for i, (low, high) in enumerate(spans)
            if all(reaches_past(low, high, *r) for r in ranges)]


def reaches_past(low, high, start: int | None, stop: int | None) -> bool:
    """Whether a file whose key span is [low, high] (None: unknown) holds keys outside
    [start, stop). Pure."""
    return (start is not None and (low is None or low < start)) or \
        (stop is not None and (high is None or high >= stop))


def _in_ranges(values, ranges: list[tuple]) -> pa.Array:
    """Which of `values` (an integer key column) lie in one of `ranges` ([start, stop))."""
    found = pa.repeat(pa.scalar(False), len(values))
    for start, stop in ranges:
        inside = pa.repeat(pa.scalar(True), len(values))
        if start is not None:
            inside = pc.and_(inside, pc.greater_equal(values, start))
        if stop is not None:
            inside = pc.and_(inside, pc.less(values, stop))
        found = pc.or_(found, inside)
    return found


def _held(values: pa.ChunkedArray, low, high) -> pa.ChunkedArray | None:
    """Which of `values` a file whose first key column lies in [low, high] may hold; None:
    any (no bounds, bounds of a type Arrow cannot compare here, or of text). Writers truncate
    the statistics of strings and bytes (Delta Spark to 32 characters), so only numbers'
    bounds are taken: a file skipped wrongly would leave a key's old row beside its new one.
    Each file then joins only the changes within its bounds (the work follows the changes
    and silver's rows, not their product)."""
    if low is None or high is None or not (pa.types.is_integer(values.type) or
                                           pa.types.is_decimal(values.type)):
        return None
    try:
        return pc.and_(pc.greater_equal(values, low), pc.less_equal(values, high))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None


def _matches(target, source: pa.Table, key: list[str]) -> pa.Table:
    """The pairs of a target row and a source row with the same key: their indexes."""
    rows = pa.table({**{k: target.column(k) for k in key},
                     _TARGET: _indexes(target.num_rows)})
    return rows.join(source, keys=key, join_type="inner", use_threads=False)


def _indexes(count: int) -> pa.Array:
    """0, 1, ... count - 1 (from numpy: a Python range takes 0.2 s a million)."""
    return pa.array(np.arange(count, dtype=np.int64))


def _later(found: pa.Table, target, changes: pa.Table) -> pa.ChunkedArray:
    """Per matched pair: whether the source row's change is later than the target row."""
    return pc.greater(pc.take(changes["_cdc_offset"], found[_SOURCE]),
                      pc.take(target.column("_cdc_offset"), found[_TARGET]))


def _batches(parquet: pq.ParquetFile, schema: pa.Schema, groups: list[int] | None = None):
    """A file's rows a row group at a time (pyarrow decodes one whole anyway; lake/parquet_files.py
    cuts them at ROW_GROUP_BYTES), in silver's columns; `groups`: only those."""
    names = [n for n in schema.names if n in parquet.schema_arrow.names]
    for group in range(parquet.metadata.num_row_groups) if groups is None else groups:
        yield from _conformed(parquet.read_row_group(group, columns=names), schema).to_batches()


def _read(parquet: pq.ParquetFile, groups: list[int] | None, columns: list[str]) -> pa.Table:
    """`columns` of a file's row groups (`groups`: only those)."""
    if groups is None:
        return parquet.read(columns=columns)
    return parquet.read_row_groups(groups, columns=columns)


def _spans(parquet: pq.ParquetFile, column: str) -> list[tuple]:
    """Each row group's [min, max] of `column` from the file's footer ((None, None): not
    known)."""
    meta = parquet.metadata
    index = next((j for j in range(meta.num_columns) if meta.schema.column(j).path == column),
                 None)
    spans = []
    for group in range(meta.num_row_groups):
        stats = None if index is None else meta.row_group(group).column(index).statistics
        spans.append((stats.min, stats.max) if stats is not None and stats.has_min_max
                     else (None, None))
    return spans


def _within(later: pa.Table, start: int, count: int) -> pa.Table:
    """The later changes of a file's rows start .. start + count - 1, those rows numbered
    from 0."""
    rows = later[_TARGET]
    inside = pc.and_(pc.greater_equal(rows, start), pc.less(rows, start + count))
    part = later.filter(inside)
    return part.set_column(0, _TARGET, pc.subtract(part[_TARGET], start))


def _merged(batch: pa.RecordBatch, later: pa.Table, changes: pa.Table, schema: pa.Schema,
            inside: pa.Array | None = None):
    """A target batch as the MERGE leaves it, given its rows' later changes (`later`: row in
    the batch, source row): its rows without one (of those `inside`, if given), then those
    changes that are no removal."""
    gone = pc.is_in(_indexes(batch.num_rows), value_set=later[_TARGET].combine_chunks())
    keep = pc.invert(gone)
    kept = batch.filter(keep if inside is None else pc.and_(keep, inside))
    if kept.num_rows:
        yield kept
    replacing = later.filter(pc.invert(pc.take(changes["_cdc_remove"], later[_SOURCE])))
    if replacing.num_rows:
        yield from _conformed(changes.take(replacing[_SOURCE]), schema).to_batches()


def _conformed(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` in silver's columns and types (a column silver gained later: NULL)."""
    return pa.table([table[f.name].cast(f.type) if f.name in table.column_names else
                     pa.nulls(table.num_rows, f.type) for f in schema], schema=schema)
