"""Child process for the bare-MERGE baseline: one MERGE INTO of pre-deduplicated changes
(`_cdc_op` 'd' deletes, others upsert), on the engine the benchmark runs on (`MODE [URL]`,
default the embedded Sail)."""
import json
import sys
import time

from cdc_sql import engine as engines
from cdc_sql.lake.tables import table_ref
from cdc_sql.sql import quote


def main(silver: str, changes: str, key: str, mode: str = "sail", url: str = "") -> None:
    engine = engines.start(mode, url)
    try:
        engine.read(changes).createOrReplaceTempView("bare_changes")
        columns, op = [quote(c) for c in engine.read(silver).columns], quote("_cdc_op")
        sql = (f"MERGE INTO {table_ref(silver)} AS t USING bare_changes AS s "
               f"ON t.{quote(key)} = s.{quote(key)} "
               f"WHEN MATCHED AND s.{op} = 'd' THEN DELETE "
               f"WHEN MATCHED THEN UPDATE SET {', '.join(f't.{c} = s.{c}' for c in columns)} "
               f"WHEN NOT MATCHED AND s.{op} <> 'd' THEN INSERT ({', '.join(columns)}) "
               f"VALUES ({', '.join(f's.{c}' for c in columns)})")
        started = time.perf_counter()
        engine.spark.sql(sql).collect()
        print(json.dumps({"seconds": time.perf_counter() - started}))
    finally:
        engine.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
