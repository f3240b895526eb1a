"""JVM Spark's own parser and analyser over cdc-sql's SQL, in a classic `local[1]` session of
the Spark jars that ship with pyspark (run as a child process: the tests' own sessions are
Spark Connect clients). Delta's jars are not here, so Delta tables are stood in for by empty
Parquet tables of the same schemas.

stdin: {"parse": [sql, ...], "programs": [[op, ...], ...]}; stdout: {"parse": [error or None],
"programs": [[(title, error or None or "skipped: ..."), ...]]}. Ops, in order:
- {"standin": path, "schema": StructType JSON}: an empty Parquet table for `delta.`path``;
- {"standin": path, "like": view, "drop": [...], "history": bool, "held": bool}: one with a
  view's columns (for silver; as a history table: offsets and times become valid_from/to, plus
  _cdc_current, and with "held", history on chosen columns, they stay too);
- {"splits": view, "rows": [...]}: the done-splits view;
- {"view": name, "sql", "args", "title"}: analyse it and define the temp view;
- {"check": sql, "args", "title"}: analyse only.
"""
import json
import os
import re
import shutil
import sys
import tempfile

DELTA = re.compile(r"delta\.`([^`]+)`")


def main() -> None:
    os.environ.pop("SPARK_REMOTE", None)
    from pyspark.sql import SparkSession

    job = json.load(sys.stdin)
    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    parser = spark._jsparkSession.sessionState().sqlParser()
    parsed = []
    for sql in job.get("parse", []):
        try:
            parser.parsePlan(sql)
            parsed.append(None)
        except Exception as exc:  # noqa: BLE001 - py4j's error, reported per statement
            parsed.append(_first_line(exc))
    programs = [_run(spark, program) for program in job.get("programs", [])]
    spark.stop()
    print(json.dumps({"parse": parsed, "programs": programs}))


def _run(spark, program: list[dict]) -> list:
    """One program's ops in order, its stand-in tables in a directory removed at the end."""
    root = tempfile.mkdtemp(prefix="cdc-jvm-")
    try:
        return _ops(spark, program, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _ops(spark, program: list[dict], root: str) -> list:
    from pyspark.sql.types import BooleanType, StringType, StructType, TimestampType

    standins, out = {}, []
    for op in program:
        if "standin" in op:
            if "schema" in op:
                schema = StructType.fromJson(json.loads(op["schema"]))
            else:
                fields = [f for f in spark.table(op["like"]).schema.fields
                          if f.name not in op.get("drop", [])]
                if op.get("history"):
                    fields = [f for f in fields if op.get("held") or
                              f.name not in ("_cdc_offset", "_cdc_ts")]
                    for name, kind in (("_cdc_valid_from", StringType()),
                                       ("_cdc_valid_from_ts", TimestampType()),
                                       ("_cdc_valid_to", StringType()),
                                       ("_cdc_valid_to_ts", TimestampType()),
                                       ("_cdc_current", BooleanType())):
                        fields.append(StructType().add(name, kind).fields[0])
                schema = StructType(fields)
            path = os.path.join(root, str(len(standins)))
            spark.createDataFrame([], schema).write.parquet(path)
            standins[op["standin"]] = path
        elif "splits" in op:
            spark.createDataFrame([tuple(r) for r in op["rows"]],
                                  "split_id INT, attempt STRING, watermark STRING") \
                .createOrReplaceTempView(op["splits"])
        else:
            sql = op.get("view") and op["sql"] or op["check"]
            missing = [p for p in DELTA.findall(sql) if p not in standins]
            if missing:
                out.append((op["title"], f"skipped: reads {', '.join(missing)}"))
                continue
            sql = DELTA.sub(lambda m: f"parquet.`{standins[m.group(1)]}`", sql)
            try:
                frame = spark.sql(sql, args=op.get("args") or None)
                frame.schema  # noqa: B018 - analysis happens here
                if op.get("view"):
                    frame.createOrReplaceTempView(op["view"])
                out.append((op["title"], None))
            except Exception as exc:  # noqa: BLE001 - reported per statement
                out.append((op["title"], _first_line(exc)))
    return out


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0][:500]


if __name__ == "__main__":
    main()
