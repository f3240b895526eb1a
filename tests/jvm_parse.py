"""Parse SQL with JVM Spark's own parser (a classic `local[1]` session of the Spark jars that
ship with pyspark): JSON list of statements on stdin, JSON list of errors (None: parsed) out.
Run as a child process: the tests' own sessions are Spark Connect clients."""
import json
import os
import sys


def main() -> None:
    os.environ.pop("SPARK_REMOTE", None)
    from pyspark.sql import SparkSession

    statements = json.load(sys.stdin)
    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    parser = spark._jsparkSession.sessionState().sqlParser()
    errors = []
    for sql in statements:
        try:
            parser.parsePlan(sql)
            errors.append(None)
        except Exception as exc:  # noqa: BLE001 - py4j's error, reported per statement
            errors.append(str(exc).splitlines()[0][:500])
    spark.stop()
    print(json.dumps(errors))


if __name__ == "__main__":
    main()
