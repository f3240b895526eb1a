"""How one pipeline table becomes one silver table (`SilverPlan`), and the foreign-key
cascade topology between silver tables. Pure: no lake, no engine."""
from __future__ import annotations

from dataclasses import dataclass, replace

from cdc_sql import cascades
from cdc_sql.cascades import ForeignKey
from cdc_sql.config.model import Table
from cdc_sql.config.projection import Projection, resolve_projection
from cdc_sql.errors import ConfigError, SourceError
from cdc_sql.lake import semantics
from cdc_sql.source.schema import SourceTable, key_text_name
from cdc_sql.sql import quote

ENGINE_COLUMNS = ("_cdc_offset", "_cdc_op", "_cdc_ts")
HISTORY_COLUMNS = ("_cdc_op", "_cdc_valid_from", "_cdc_valid_from_ts", "_cdc_valid_to",
                   "_cdc_valid_to_ts", "_cdc_current")


@dataclass(frozen=True)
class SilverPlan:
    """How one pipeline table becomes one silver table."""

    spec: Table
    sources: tuple[SourceTable, ...]
    projection: Projection
    key_texts: tuple[tuple[str, str], ...] = ()  # temporal key columns: (source, output name)
    cascades: tuple[ForeignKey, ...] = ()  # foreign keys whose cascades silver applies

    @property
    def as_is(self) -> bool:
        """Silver holds the source's rows unchanged: one source table, no projection."""
        return not self.sharded and self.projection.where is None and \
            self.projection.columns == tuple((quote(c.name), c.name)
                                             for c in self.sources[0].columns)

    @property
    def sharded(self) -> bool:
        return self.spec.is_pattern

    @property
    def key(self) -> tuple[str, ...]:
        per_shard = self.sharded and not self.spec.key_unique_across_shards
        texts = {out for _, out in self.key_texts}
        return tuple(key_text_name(k) if k in texts else k for k in self.projection.key) + \
            (("_cdc_source_table",) if per_shard else ())

    @property
    def row_key(self) -> tuple[str, ...]:
        """The key in the columns users see (temporal key columns by their typed value)."""
        per_shard = self.sharded and not self.spec.key_unique_across_shards
        return self.projection.key + (("_cdc_source_table",) if per_shard else ())

    @property
    def row_columns(self) -> tuple[str, ...]:
        """The row as users see it: the projected columns, the text of temporal key columns,
        and the shard a row came from."""
        extra = ("_cdc_source_table",) if self.sharded else ()
        return tuple(name for _, name in self.projection.columns) + \
            tuple(key_text_name(out) for _, out in self.key_texts) + extra

    @property
    def columns(self) -> tuple[str, ...]:
        """Silver's columns."""
        n = len(self.projection.columns)
        return self.row_columns[:n] + ENGINE_COLUMNS + semantics.extra_columns(self.spec) + \
            self.row_columns[n:]

    @property
    def snapshot_keys_unique(self) -> bool:
        """No two snapshot rows share a silver key: splits are disjoint ranges of a real key,
        and shards' rows differ by `_cdc_source_table` unless declared unique across them."""
        single = len(self.sources) == 1 or not self.spec.key_unique_across_shards
        return single and not any(s.key_nullable for s in self.sources)

    @property
    def key_nullable(self) -> bool:
        return any(s.key_nullable for s in self.sources)

    @property
    def history_columns(self) -> tuple[str, ...]:
        """History's columns; with chosen columns, also the change each version's values are
        from (`_cdc_offset`, `_cdc_ts`: a version updated in place holds a later image than
        the change that started it)."""
        held = ("_cdc_offset", "_cdc_ts") if self.tracked is not None else ()
        return self.row_columns + HISTORY_COLUMNS + held

    @property
    def tracked(self) -> tuple[str, ...] | None:
        """The columns whose change starts a new history version (`history: {track: [...]}`
        or `{except: [...]}`), as silver names them; None: every change does."""
        chosen = self.spec.tracked
        if chosen is None:
            return None
        listed = {c.lower() for c in chosen.columns}
        names = [name for _, name in self.projection.columns if name not in self.projection.key]
        if chosen.track:
            return tuple(name for name in names if name.lower() in listed)
        return tuple(name for name in names if name.lower() not in listed)


def plan_silver(spec: Table, sources: list[SourceTable], file: str, index: int) -> SilverPlan:
    if not sources:
        raise SourceError(f"{file}: tables[{index}] (`{spec.name}`): no source table matches "
                          f"`{spec.source}` (if it was dropped or renamed, silver keeps its last "
                          f"rows: remove the entry from the pipeline, or restore the table)")
    first = sources[0]
    for other in sources[1:]:
        if [c.name for c in other.columns] != [c.name for c in first.columns] or \
                other.key != first.key:
            raise SourceError(f"{file}: tables[{index}] (`{spec.name}`): shard {other.qualified} "
                              f"has other columns or key than {first.qualified}: "
                              f"{_shard_difference(first, other)}")
    try:
        projection = resolve_projection(spec, [c.name for c in first.columns], list(first.key))
    except ConfigError as exc:
        raise ConfigError(f"{exc.detail} (table {first.qualified})", file,
                          f"tables[{index}].{exc.path or 'projection'}") from None
    _check_tracked(spec, projection, file, f"tables[{index}].history", first.qualified)
    texts = {c.name for c in first.key_text_columns}
    key_texts = tuple((source, out) for source, out in zip(first.key, projection.key)
                      if source in texts)
    plan = SilverPlan(spec, tuple(sources), projection, key_texts)
    for n, column in enumerate(spec.cluster_by):
        if column not in plan.columns:
            raise ConfigError(f"`{column}` is not a column of silver table {spec.name} (its "
                              f"columns: {', '.join(plan.columns)})", file,
                              f"tables[{index}].cluster_by[{n}]")
    return plan


def _check_tracked(spec: Table, projection: Projection, file: str, path: str,
                   source: str) -> None:
    """The columns `history` tracks (or leaves out) are silver's, and none is a key column: a
    version belongs to one key (a key change ends it and starts another at the new key), so a
    key column is neither tracked nor left out."""
    chosen = spec.tracked
    if chosen is None:
        return
    at = f"{path}.{'track' if chosen.track else 'except'}"
    names = {name.lower(): name for _, name in projection.columns}
    keys = {k.lower() for k in projection.key}
    for n, column in enumerate(chosen.columns):
        if column.lower() not in names:
            raise ConfigError(f"`{column}` is not a column of silver table `{spec.name}` (it "
                              f"has {', '.join(names.values())}; table {source})", file,
                              f"{at}[{n}]")
        if column.lower() in keys:
            raise ConfigError(f"`{column}` is a key column: a history version belongs to one "
                              f"key (a key change ends it and starts one at the new key), so "
                              f"key columns are neither tracked nor left out", file, f"{at}[{n}]")


def silver_plans(pipeline, view, kept: dict[str, set[str]] | None = None) -> list[SilverPlan]:
    """Every table of the pipeline planned over the source tables `view` found for it, with
    the foreign-key cascades it applies. `kept`: per silver table with `on_schema_change:
    ignore_new_columns` that exists, its columns: source columns added since stay out."""
    plans = [plan_silver(spec, tables, pipeline.file, i)
             for i, (spec, tables) in enumerate(zip(pipeline.tables, view.tables))]
    plans = [without_new_columns(plan, (kept or {}).get(plan.spec.name)) for plan in plans]
    applied, _ = _cascades(plans, view)
    return [replace(plan, cascades=applied.get(plan.sources[0].qualified, ())) if plan.as_is
            else plan for plan in plans]


def without_new_columns(plan: SilverPlan, columns: set[str] | None) -> SilverPlan:
    """The plan without the output columns silver does not have (`columns`: silver's, None
    when it does not exist yet), for `on_schema_change: ignore_new_columns`."""
    if columns is None or plan.spec.on_schema_change != "ignore_new_columns":
        return plan
    chosen = tuple(c for c in plan.projection.columns
                   if c[1] in columns or c[1] in plan.projection.key)
    return replace(plan, projection=replace(plan.projection, columns=chosen))


def cascade_warnings(plans: list[SilverPlan], view) -> list[str]:
    """The cascading foreign keys into captured tables that silver cannot apply (or only in
    part), for `validate` and the run's log."""
    return _cascades(plans, view)[1]


def _cascades(plans: list[SilverPlan], view):
    captured = {t.qualified: t.key for plan in plans for t in plan.sources}
    as_is = {plan.sources[0].qualified for plan in plans if plan.as_is}
    return cascades.assign(view.foreign_keys, captured, as_is)


def sources_by_table(plans: list[SilverPlan]) -> dict[str, list[str]]:
    """Silver table -> the db.table names it reads."""
    return {plan.spec.name: [t.qualified for t in plan.sources] for plan in plans}


def chained(plans: list[SilverPlan]) -> list[list[SilverPlan]]:
    """Groups of tables whose cascades set off cascades, parents first (cascades.chains)."""
    by_source: dict[str, list[SilverPlan]] = {}
    for plan in plans:
        if plan.cascades:
            by_source.setdefault(plan.sources[0].qualified, []).append(plan)
    applied = {source: found[0].cascades for source, found in by_source.items()}
    return [[plan for source in chain for plan in by_source[source]]
            for chain in cascades.chains(applied)]


def snapshot_levels(plans: list[SilverPlan]) -> dict[str, int]:
    """Per source table of a chain (`chained`), how many chain tables cascade into it before
    it. A table's splits are read only once those of the levels before it are done: every
    watermark of a table then comes after those of the tables it gets cascade moves from, so a
    cascade between them is in the child's snapshot rows or after them, never lost between."""
    levels: dict[str, int] = {}
    for group in chained(plans):
        for plan in group:
            source = plan.sources[0].qualified
            levels[source] = max([levels[fk.parent] + 1 for fk in plan.cascades
                                  if fk.parent in levels] + [levels.get(source, 0)])
    return levels


def read_whole(plans: list[SilverPlan]) -> set[str]:
    """Source tables whose key a cascade can change (an ON UPDATE CASCADE of key columns). Their
    splits are read in one consistent read, all again if one is unfinished: a cascade moves a
    row from one key range to another without a binlog event, so with ranges read at different
    watermarks the row could be in neither (moved out of a range read after the cascade, into
    one read before it)."""
    return {plan.sources[0].qualified for plan in plans for fk in plan.cascades
            if fk.on_update == "CASCADE" and set(fk.columns) & set(plan.sources[0].key)}


def cascade_parents(plans: list[SilverPlan]) -> dict[str, list[str]]:
    """Silver table -> the db.table names whose cascades it applies."""
    return {plan.spec.name: sorted({fk.parent for fk in plan.cascades}) for plan in plans
            if plan.cascades}


def carries(plans: list[SilverPlan], source: str, column: str) -> bool:
    """Every silver table reading `source` (db.table) holds its `column` as it is, so rows can
    be removed from silver by that column's values (a partition's rows: apply_truncates)."""
    readers = [p for p in plans if any(s.qualified == source for s in p.sources)]
    return bool(readers) and all((quote(column), column) in p.projection.columns
                                 for p in readers)


def _shard_difference(first: SourceTable, other: SourceTable) -> str:
    mine, theirs = [c.name for c in first.columns], [c.name for c in other.columns]
    parts = []
    if set(theirs) - set(mine):
        parts.append(f"only in {other.qualified}: {', '.join(sorted(set(theirs) - set(mine)))}")
    if set(mine) - set(theirs):
        parts.append(f"only in {first.qualified}: {', '.join(sorted(set(mine) - set(theirs)))}")
    if not parts and mine != theirs:
        parts.append(f"the columns are in another order ({', '.join(theirs)})")
    if first.key != other.key:
        parts.append(f"key ({', '.join(first.key)}) against ({', '.join(other.key)})")
    return "; ".join(parts)
