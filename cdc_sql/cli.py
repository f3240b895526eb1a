"""`cdc-sql`: validate, plan, run, verify, resnapshot, maintain, status, init, schema.
Exit codes: 0 ok, 1 failure, 2 usage."""
from __future__ import annotations

import argparse
import atexit
import json
import logging
import os
import re
import signal
import sys
import threading
from dataclasses import replace

from cdc_sql import engine, pandas_probe
from cdc_sql.config import layout
from cdc_sql.config.json_schema import reference_markdown, schema_text
from cdc_sql.config.model import Pipeline, load_pipeline
from cdc_sql.errors import CdcError, redacted
from cdc_sql.lake import semantics
from cdc_sql.lake.lake import Lake
from cdc_sql.lake.silver.facts import Facts
from cdc_sql.lake.silver.plan import (cascade_parents, cascade_warnings, silver_plans,
                                      sources_by_table)
from cdc_sql.lake.silver.route import Way, route
from cdc_sql.lake.silver.steps import batch_steps, describe
from cdc_sql.lake.state import State
from cdc_sql.location import redact
from cdc_sql.lock import target_lock
from cdc_sql.ops import status
from cdc_sql.source import failover, mysql, preflight
from cdc_sql.source.splits import plan_splits
from cdc_sql.window import Window

log = logging.getLogger("cdc_sql")


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if args.log_format == "json" else
                         logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    handler.addFilter(_redact)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        handlers=[handler], force=True)
    for noisy in ("py4j", "pymysqlreplication", "grpc", "SQLQueryContextLogger"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    # Python warnings of libraries (deprecations, a regex's FutureWarning) are no message to a
    # user: logged, and shown with -v only.
    logging.captureWarnings(True)
    logging.getLogger("py.warnings").setLevel(logging.DEBUG if args.verbose else
                                              logging.CRITICAL)
    # sqlglot warns with the statement it cannot parse in full: a source statement (a CREATE
    # USER with its password) or a projection. Its errors reach us as exceptions.
    logging.getLogger("sqlglot").setLevel(logging.CRITICAL)
    try:
        return args.handler(args)
    except CdcError as exc:
        print(f"cdc-sql: {one_line(redact(str(exc)))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 1
    except BaseException as exc:  # noqa: BLE001 - Rust panics (pyo3) are BaseExceptions too
        if isinstance(exc, SystemExit):
            raise
        log.debug("the traceback of the unexpected error", exc_info=True)
        text = shown(str(exc)).strip().splitlines()
        print(f"cdc-sql: unexpected {type(exc).__name__}: {one_line(text[0] if text else '')} "
              f"(a bug in cdc-sql: please report it with the output of the same command run "
              f"with -v)", file=sys.stderr)
        return 1


def one_line(text: str) -> str:
    """A message as one line of plain text: line breaks and control characters a file or a
    value brought into it are escaped (they would split it, or drive the terminal)."""
    return re.sub(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]",
                  lambda m: m.group().encode("unicode_escape").decode(), text)


def shown(text: str) -> str:
    """Text as a user may see it: every hidden value shown as its ${VAR} (errors.hide), and
    passwords in URLs and signatures in query strings as *** (location.redact)."""
    return redact(redacted(text))


def _redact(record: logging.LogRecord) -> bool:
    """A log filter: the message as `shown`, whichever library's message carries it."""
    record.msg, record.args = shown(record.getMessage()), None
    return True


class JsonFormatter(logging.Formatter):
    """Structured logs: time, level, logger, message (and the error, when there is one)."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {"time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"), "level": record.levelname,
                 "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            entry["error"] = redacted(self.formatException(record.exc_info))
        return json.dumps(entry)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cdc-sql", description="MySQL change data capture into "
                                     "exactly-once Delta Lake tables on Spark")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--log-format", choices=("text", "json"), default="text",
                        help="json: one JSON object per log line (for log collectors)")
    commands = parser.add_subparsers(dest="command", required=True)

    def command(name: str, handler, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.add_argument("pipeline", help="pipeline YAML file")
        sub.set_defaults(handler=handler)
        return sub

    validate = command("validate", _validate, "check the YAML, the source tables, keys, binlog "
                       "settings and projections; write nothing")
    validate.add_argument("--offline", action="store_true",
                          help="check only what needs no database")
    plan = command("plan", _plan, "show the splits, the SQL each step will run, and which "
                   "path each table's windows take")
    plan.add_argument("--engine", choices=engine.MODES, help="override the pipeline's engine.mode")
    _sql_only_option(plan)
    run = command("run", _run, "capture and merge; follow the binlog until SIGINT/SIGTERM")
    run.add_argument("--until-caught-up", action="store_true",
                     help="stop once silver has caught up with the source position seen at "
                          "start (for scheduled jobs)")
    run.add_argument("--give-up-after", type=float, default=300.0, metavar="SECONDS",
                     help="follow mode: how long to keep retrying while the source is "
                          "unreachable (default 300)")
    _engine_options(run)
    _sql_only_option(run)
    verify = command("verify", _verify, "compare silver with the source row by row; exit 0 when "
                     "equal, 1 with the differing keys")
    verify.add_argument("--tables", help="comma-separated silver table names (default: all)")
    verify.add_argument("--repair", action="store_true",
                        help="read the differing keys again at a watermark (one range re-read "
                             "per table, silver changed by hand included), run the pipeline "
                             "until caught up, verify again")
    _engine_options(verify)
    maintain = command("maintain", _maintain, "prune bronze that every silver table has applied, "
                       "compact and vacuum bronze, silver and state")
    maintain.add_argument("--retention-hours", type=float,
                          help="override target.retention_hours (0: prune and vacuum all it can)")
    _engine_options(maintain)
    again = command("resnapshot", _resnapshot, "read tables again while the pipeline runs: "
                    "their silver stays readable and is replaced in one commit by the new "
                    "snapshot (the next run, or the one following the binlog, does it)")
    again.add_argument("--tables", help="comma-separated silver table names (default: all; "
                                        "every table also mends a failover capture cannot "
                                        "resume from)")
    again.add_argument("--where", metavar="PREDICATE",
                       help="read again only the rows matching this MySQL predicate on key "
                            "columns of the one table named by --tables (e.g. \"id BETWEEN 10 "
                            "AND 20\"): silver's rows in it are replaced at a watermark, rows "
                            "the source deleted removed; the rest of silver is not touched")
    _engine_options(again)
    init = commands.add_parser("init", help="print a starter pipeline for a source database",
                               description="print a commented starter pipeline for a source "
                                           "database (password from $MYSQL_PASSWORD)")
    init.add_argument("url", help="mysql://user@host[:port]/database")
    init.add_argument("--tables", metavar="REGEX", help="only tables whose name matches")
    init.set_defaults(handler=_init)
    schema = commands.add_parser("schema", help="print the JSON Schema of pipeline YAML",
                                 description="print the JSON Schema of pipeline YAML")
    schema.add_argument("--markdown", action="store_true",
                        help="the YAML reference as Markdown instead (docs/pipeline-yaml.md)")
    schema.set_defaults(handler=_schema)
    status = command("status", _status, "show per-table phase, splits and offsets")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    _engine_options(status)
    return parser


def _engine_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--engine", choices=engine.MODES,
                        help="override the pipeline's engine.mode")
    parser.add_argument("--engine-url", help="Spark Connect URL for --engine remote")


def _load(args, offline: bool = False) -> Pipeline:
    """The pipeline file, its warnings shown (on stderr: stdout is the command's output)."""
    pipeline = load_pipeline(args.pipeline, offline=offline)
    for warning in pipeline.warnings:
        if args.handler is _validate:
            print(f"warning: {one_line(warning)}", file=sys.stderr)
        else:
            log.warning("%s", warning)
    return pipeline


def _sql_only_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sql-only", action="store_true",
                        help="every silver window through the engine's SQL MERGE INTO (sets "
                             "engine.sql_only): no in-process delta-rs merge, no first version "
                             "made of bronze's files")


def _engine(args, pipeline: Pipeline):
    return engine.start(_engine_mode(args, pipeline), args.engine_url or pipeline.engine.url,
                        pipeline.engine.conf)


def _engine_mode(args, pipeline: Pipeline) -> str:
    """The engine's mode, once it is known to write every table's layout."""
    mode = args.engine or pipeline.engine.mode
    layout.check_engine(pipeline, mode)
    return mode


def _validate(args) -> int:
    pipeline = _load(args, offline=args.offline)
    layout.check_engine(pipeline, pipeline.engine.mode)  # said now, not at the first run
    if args.offline:
        print(f"{args.pipeline}: valid ({len(pipeline.tables)} tables; source not checked)")
        return 0
    view = preflight.inspect_source(pipeline)
    plans = silver_plans(pipeline, view)
    view.warnings += cascade_warnings(plans, view)
    source = pipeline.source
    if source.startup == "initial":
        with mysql.cursor(source) as cur:
            view.warnings += preflight.check_retention(cur, view.source_tables,
                                                       source.parallelism)
    for warning in view.warnings:
        print(f"warning: {one_line(redacted(warning))}", file=sys.stderr)
    for plan in plans:
        names = ", ".join(t.qualified for t in plan.sources)
        chosen = plan.sources[0].key_origin if plan.sources[0].key_index else \
            ", ".join(plan.row_key)
        print(f"  {plan.spec.name}: {names} (key: {chosen})")
    databases = sorted({t.db for t in view.source_tables})
    print(redacted(f"grants {source.user} needs (and no more):"))
    for grant, why in preflight.needed_grants(source.user, view.mariadb, source.startup,
                                              databases):
        print(redacted(f"  {grant};  -- {why}"))
    with mysql.cursor(source) as cur:
        found = mysql.variables(cur, "log_slave_updates", "log_replica_updates",
                                "gtid_strict_mode", "gtid_mode")
    print(f"failover: {failover.readiness(view.mariadb, found)}")
    if pipeline.root.object_store:
        from cdc_sql.lake import objects

        print(objects.check_target(pipeline.root, os.environ))
    print(f"{args.pipeline}: valid ({len(plans)} tables, source "
          f"{'MariaDB' if view.mariadb else 'MySQL'}, binlog at {view.end})")
    return 0


def _plan(args) -> int:
    pipeline = _load(args)
    view = preflight.inspect_source(pipeline)
    lake = Lake(None, pipeline.root, None,  # paths only: plan reads no lake table
                args.sql_only or pipeline.engine.sql_only)
    mode = args.engine or pipeline.engine.mode
    # None: the engine that answers decides (remote, active)
    liquid = getattr(engine.known(mode), "clusters_liquid", None)
    with mysql.cursor(pipeline.source) as cur:
        for plan in silver_plans(pipeline, view):
            print(f"== {plan.spec.name} -> {lake.silver_path(plan.spec.name)}")
            print(_route(plan, lake, mode))
            print(f"-- layout: {layout.describe(plan.spec, plan.key, liquid)}")
            for table in plan.sources:
                splits = plan_splits(cur, table, pipeline.source.chunk_size,
                                     pipeline.source.parallelism)
                print(f"-- {table.qualified}: {len(splits)} snapshot splits on "
                      f"({table.key_origin})")
                for split in splits:
                    print(f"   split {split.split_id}: [{split.lower}, {split.upper})")
            for fk in plan.cascades:
                print(f"-- foreign key `{fk.name}` ({fk.rules()} from {fk.parent}): the rows "
                      f"its cascades change join a batch's images")
            first = Window("", ":upto", {t.qualified: () for t in plan.sources}, first=True)
            later = Window(":after", ":upto", history_untouched=True)
            cascaded = bool(plan.cascades)
            print("-- the first batch (the snapshot rows and the changes up to :upto):")
            print(describe(batch_steps(lake, plan, first, Facts(), cascaded)))
            print("-- every later batch (the changes in (:after, :upto]):")
            print(describe(batch_steps(lake, plan, later, Facts(), cascaded)))
    return 0


def _route(plan, lake: Lake, mode: str) -> str:
    """Which way the table's windows take, and why (`plan`; lake/silver/route.py)."""
    found = route(plan, None, lake, engine_mode=mode)
    if found.way is Way.ENGINE_SQL:
        return f"-- windows: every one through the engine's SQL below: {found.reason}"
    return f"-- windows: merged in this process by delta-rs with the same rule {found.reason}"


def _run(args) -> int:
    from cdc_sql.run.runner import run_pipeline  # the run's modules: only for `run`

    pipeline = _load(args)
    if args.sql_only:
        pipeline = replace(pipeline, engine=replace(pipeline.engine, sql_only=True))
    stop = threading.Event()

    def request_stop(signum, _frame):
        log.info("%s received: finishing the current step, then exiting",
                 signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    _engine_mode(args, pipeline)  # refused before the lake is touched
    with target_lock(pipeline.root, "run", on_lost=stop.set):
        engine = _engine(args, pipeline)
        try:
            summary = run_pipeline(pipeline, engine, stop, args.until_caught_up,
                                   args.give_up_after)
        finally:
            engine.stop()
    log.info("run %s: %s in %.1f s (snapshot %.1f s, %d rows; capture %.1f s, %d changes; "
             "silver %.1f s, %d tables)", summary.run_id, summary.outcome, summary.seconds,
             summary.seconds_snapshot, summary.snapshot_rows, summary.seconds_capture,
             summary.captured_changes, summary.seconds_merge, len(summary.merged_tables))
    return 0


def _verify(args) -> int:
    from cdc_sql.ops.verify import verify_table  # sqlglot's MySQL transpiler: only when verifying

    pipeline = _load(args)
    names = _table_names(args, pipeline)
    engine = _engine(args, pipeline)
    differing = []
    try:
        checkpoint = State(Lake.open(engine, pipeline.root)).load()
        for name in names:
            report = verify_table(engine, pipeline, pipeline.table(name), checkpoint,
                                  keys=args.repair)
            print(f"{name}: {report.summary()}")
            if not report.equal:
                differing.append(report)
        if args.repair and differing:
            differing = _repair(pipeline, engine, differing)
    finally:
        engine.stop()
    return 1 if differing else 0


def _repair(pipeline: Pipeline, engine, reports: list) -> list:
    """`verify --repair`: the differing keys of each table read again (one range re-read
    each), the pipeline run until caught up, then verified again; returns the reports that
    still differ."""
    from cdc_sql.ops.verify import MAX_REPAIR_KEYS, repair_predicate, verify_table
    from cdc_sql.run.runner import run_pipeline

    plans = silver_plans(pipeline, preflight.inspect_source(pipeline))
    wanted: dict[str, tuple[str, set]] = {}  # source table -> (a silver table, its keys)
    for report in reports:
        if not report.keys:
            raise CdcError(f"verify --repair: {report.name}: {report.summary()}; no key to "
                           f"read again: re-snapshot it (cdc-sql resnapshot --tables "
                           f"{report.name})")
        plan = next(p for p in plans if p.spec.name == report.name)
        order = [n for _, n in plan.projection.columns if n in plan.projection.key]
        at = [order.index(k) for k in plan.sources[0].key if k in order]
        name, keys = wanted.setdefault(plan.sources[0].qualified, (report.name, set()))
        keys |= {tuple(k[i] for i in at) for found in report.keys.values() for k in found}
    for name, keys in wanted.values():
        if len(keys) > MAX_REPAIR_KEYS:
            raise CdcError(f"verify --repair: {name}: {len(keys):,} keys differ (more than "
                           f"{MAX_REPAIR_KEYS:,}): re-snapshot it whole (cdc-sql resnapshot "
                           f"--tables {name})")
    with target_lock(pipeline.root, "run"):  # no run writes state meanwhile
        for name, keys in wanted.values():
            table = next(p for p in plans if p.spec.name == name).sources[0]
            predicate = repair_predicate(sorted(keys, key=repr),
                                         [table.column(k) for k in table.key])
            request_range(pipeline, plans, name, predicate, engine,
                          accept=tuple(r.name for r in reports))
        run_pipeline(pipeline, engine, threading.Event(), True, 300.0)
    checkpoint = State(Lake.open(engine, pipeline.root)).load()
    still = []
    for report in reports:
        count = len({k for found in report.keys.values() for k in found})
        report = verify_table(engine, pipeline, pipeline.table(report.name), checkpoint)
        print(f"{report.name}: repaired {count:,} differing keys (read again at a watermark); "
              f"now {report.summary()}")
        if not report.equal:
            still.append(report)
    return still


def _resnapshot(args) -> int:
    from cdc_sql import resnapshot

    pipeline = _load(args)
    names = _table_names(args, pipeline)
    view = preflight.inspect_source(pipeline)
    plans = silver_plans(pipeline, view)
    if args.where is not None:
        return _resnapshot_range(args, pipeline, names, plans)
    silver, tables = resnapshot.closure(names, sources_by_table(plans), cascade_parents(plans))
    engine = _engine(args, pipeline)
    try:
        State(Lake.open(engine, pipeline.root)).write(*resnapshot.requests(
            tables, f"cdc-sql resnapshot --tables {','.join(silver)}", preflight.now()))
    finally:
        engine.stop()
    also = sorted(set(silver) - set(names))
    print(f"re-snapshot requested: {', '.join(tables)}"
          + (f" (also for {', '.join(also)}, which reads them too)" if also else ""))
    print(f"the next run (or the one following the binlog) reads them again; {', '.join(silver)} "
          f"stay readable as they are until the new snapshot replaces them in one commit")
    return 0


def _resnapshot_range(args, pipeline: Pipeline, names: list[str], plans) -> int:
    """`resnapshot --where`: one range re-read asked for (resnapshot.range_request)."""
    if not args.tables or len(names) != 1:
        raise CdcError("resnapshot --where: name exactly one table with --tables")
    engine = _engine(args, pipeline)
    try:
        entry = request_range(pipeline, plans, names[0], args.where, engine)
    finally:
        engine.stop()
    print(f"range re-read requested: {entry.source_table} where {entry.predicate}")
    print(f"the next run (or the one following the binlog) reads those rows at a watermark "
          f"and replaces silver's rows in that range with them (rows the source deleted are "
          f"removed); {names[0]} waits for it, readable as it is")
    return 0


def request_range(pipeline: Pipeline, plans, name: str, where: str, engine,
                  accept: tuple[str, ...] = ()):
    """Check a range re-read of silver table `name` and write its split into state. `accept`
    (verify --repair, which reads every differing key again): of these silver tables, the
    commits since cdc-sql's last one are taken as its own, so a hand change does not stop the
    repair."""
    from cdc_sql import resnapshot
    from cdc_sql.source import predicates

    plan = next(p for p in plans if p.spec.name == name)
    source = plan.sources[0]
    predicate = predicates.check(where, source)
    readers = [p for p in plans if any(s.qualified == source.qualified for s in p.sources)]
    lake = Lake.open(engine, pipeline.root)
    state = State(lake)
    checkpoint = state.load()
    why = resnapshot.range_refusal(checkpoint, source.qualified, readers,
                                   predicates.columns(predicate))
    if why:
        raise CdcError(f"resnapshot --tables {name} --where {where[:200]!r}: {why}")
    entry = resnapshot.range_request(checkpoint, source.qualified, predicate)
    accepted = [replace(table, silver_version=lake.tables.version(lake.silver_path(p.spec.name)))
                for p in readers if p.spec.name in accept
                for table in [checkpoint.table(p.spec.name)] if table is not None]
    state.write(entry, *accepted)
    return entry


def _table_names(args, pipeline: Pipeline) -> list[str]:
    """--tables, checked against the pipeline's tables (all of them when not given)."""
    names = [n.strip() for n in args.tables.split(",") if n.strip()] if args.tables else \
        [t.name for t in pipeline.tables]
    unknown = sorted(set(names) - {t.name for t in pipeline.tables})
    if unknown or not names:
        raise CdcError(f"{args.pipeline}: no table named {', '.join(unknown) or '(none given)'} "
                       f"(its tables: {', '.join(t.name for t in pipeline.tables)})")
    return names


def _maintain(args) -> int:
    from cdc_sql.ops.maintain import maintain  # the run's modules: only for `maintain`

    pipeline = _load(args)
    with target_lock(pipeline.root, "maintain"):
        engine = _engine(args, pipeline)
        try:
            report = maintain(engine, pipeline, args.retention_hours)
        finally:
            engine.stop()
    for path, rows in report["pruned"].items():
        print(f"pruned {rows:,} rows from {path}")
    for path, files in report["files"].items():
        print(f"compacted and vacuumed {path}" + (f": {files}" if files else ""))
    for reason in report["skipped"]:
        print(f"skipped: {reason}", file=sys.stderr)
    return 0


def _init(args) -> int:
    from cdc_sql import init  # sqlglot-free, but only `init` needs it

    source, database = init.parse_url(args.url, os.environ.get(init.PASSWORD_VARIABLE, ""))
    init.table_pattern(args.tables)
    tables, mariadb, problems = init.read_source(source, database, args.tables)
    sys.stdout.write(init.starter_yaml(source, database, tables, mariadb, problems))
    for table in tables:
        if not table.key:
            log.warning("%s.%s has no key: fill in its primary_key: in the starter file",
                        database, table.name)
    return 0


def _schema(args) -> int:
    sys.stdout.write(reference_markdown() if args.markdown else schema_text())
    return 0


def _status(args) -> int:
    pipeline = _load(args)
    engine = _engine(args, pipeline)
    try:
        lake = Lake.open(engine, pipeline.root)
        checkpoint = State(lake).load()
        soft_deleted = {spec.name: semantics.soft_deleted_rows(lake, spec)
                        for spec in pipeline.tables if semantics.soft(spec)}
    finally:
        engine.stop()
    end, logs = status.source_binlog(pipeline)
    report = status.report(pipeline, checkpoint, end, logs, soft_deleted=soft_deleted)
    print(json.dumps(report, indent=2) if args.json else status.render(report))
    return 0


def console() -> None:
    """The `cdc-sql` command. Its work is durable when main() returns (every commit is
    synchronous), so the process ends there, after the exit handlers and with its output
    flushed: tearing the interpreter down (extension runtimes, module state) took a noticeable
    part of every command (docs/performance.md). pyarrow does not import pandas unless
    something else does (`pandas_probe`)."""
    pandas_probe.defer()
    code = main()
    logging.shutdown()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    console()
