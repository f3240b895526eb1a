"""The jars a JVM Spark needs beside its own: Delta Lake for the pyspark in use, and hadoop-aws
(S3A, for `s3://` and `s3a://` targets) for the Hadoop it ships.

scripts/setup.sh fetches them once into `folder()` (inside the Python environment, so each venv
holds the jars of its own pyspark) with `mvn dependency:copy-dependencies` on
conf/spark-jars/pom.xml, for the Delta artifact and version `delta_for` names and the Hadoop
version of pyspark's own hadoop-client (hadoop-aws must match it), and removes the jars pyspark
already ships (Spark's own versions would win on the classpath anyway). Engine
mode `local` and the Spark Connect servers of the tests put the rest on `spark.jars`.

Why not Spark's own `--packages`: it resolves from Maven Central too, but through the local
Maven repository first, and a repository that `mvn` filled holds poms whose jars it never
fetched, which `--packages` then reports as NOT FOUND (measured here with Delta 4.4).

`python -m cdc_sql.jars maven` prints the Maven properties for setup.sh; `prune` removes the
jars pyspark ships; `check` says whether the folder holds what this pyspark needs.
"""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from cdc_sql.errors import CdcError

# Spark line -> (Delta's Maven artifact, the newest release that runs with it). Delta 4.1+
# publishes one artifact per Spark line; Delta 4.0 is the last release for Spark 4.0 under the
# old name. SCALA is Spark 4's only Scala.
DELTA_FOR_SPARK = {
    "4.1": ("delta-spark_4.1_2.13", "4.4.0"),
    "4.0": ("delta-spark_2.13", "4.0.1"),
}
# The AWS SDK v2 modules S3A loads, at the version Hadoop 3.4.2 was built with; Hadoop 3.4.1
# (pyspark 4.0) was built with 2.24.6, whose transfer manager this machine's Maven Central does
# not serve, and 2.29.52 is a compatible upgrade of it (before the SDK's 2.30 checksum change).
AWS_SDK = "2.29.52"
STAMP = ".installed"  # in the folder: the artifact it holds, io.delta:<artifact>:<version>
_VERSIONED = re.compile(r"^(.+?)-\d[^/]*\.jar$")


def spark_line(version: str) -> str:
    """'4.1' of '4.1.4'."""
    return ".".join(version.split(".")[:2])


def delta_for(spark_version: str) -> tuple[str, str]:
    """Delta's artifact and version for a Spark version; a clear error for a line with none."""
    line = spark_line(spark_version)
    if line not in DELTA_FOR_SPARK:
        raise CdcError(f"no Delta Lake release is known to cdc-sql for Spark {spark_version} "
                       f"(supported Spark lines: {', '.join(sorted(DELTA_FOR_SPARK))})")
    return DELTA_FOR_SPARK[line]


def hadoop_version(spark_jars: Path) -> str:
    """The Hadoop release pyspark ships ('3.4.2' of hadoop-client-api-3.4.2.jar): hadoop-aws
    must be the same release, or S3A fails on classes its Hadoop lacks."""
    for name in sorted(os.listdir(spark_jars)):
        match = re.match(r"^hadoop-client-api-(\d[^/]*)\.jar$", name)
        if match:
            return match.group(1)
    raise CdcError(f"pyspark's jars in {spark_jars} hold no hadoop-client-api jar: cannot tell "
                   f"which hadoop-aws matches it")


def folder() -> Path:
    """Where the jars are: $CDC_SQL_SPARK_JARS, else inside this Python environment."""
    return Path(os.environ.get("CDC_SQL_SPARK_JARS") or
                Path(sys.prefix) / "share" / "cdc-sql" / "spark-jars")


def installed(where: Path | None = None) -> str | None:
    """The Delta artifact the folder holds (io.delta:<artifact>:<version>), None if none."""
    stamp = (where or folder()) / STAMP
    return stamp.read_text().strip() if stamp.is_file() else None


def delta_jars(spark_version: str, where: Path | None = None) -> list[str]:
    """The jars to put on `spark.jars` for this Spark; CdcError naming what is wrong when the
    folder is missing or holds another Spark line's Delta."""
    where = where or folder()
    artifact, version = delta_for(spark_version)
    found = installed(where)
    if found is None:
        raise CdcError(f"the Delta Lake jars are not installed in {where}: run scripts/setup.sh "
                       f"(it fetches io.delta:{artifact}:{version} with Maven), or set "
                       f"CDC_SQL_SPARK_JARS to a folder holding them")
    if found.split(":")[1] != artifact:
        raise CdcError(f"the Delta Lake jars in {where} ({found}) are not for Spark "
                       f"{spark_line(spark_version)} (pyspark {spark_version} needs "
                       f"io.delta:{artifact}): run scripts/setup.sh again")
    return sorted(str(p) for p in where.glob("*.jar"))


def artifact_name(jar: str) -> str | None:
    """'zstd-jni' of 'zstd-jni-1.5.7-3.jar'."""
    match = _VERSIONED.match(os.path.basename(jar))
    return match.group(1) if match else None


def shipped(spark_jars: Path) -> set[str]:
    """The artifacts whose jars pyspark ships."""
    return {name for name in map(artifact_name, os.listdir(spark_jars)) if name}


def prune(where: Path, spark_jars: Path) -> list[str]:
    """Remove the jars pyspark already ships (any version); returns what stays."""
    ships = shipped(spark_jars)
    for jar in where.glob("*.jar"):
        if artifact_name(jar.name) in ships:
            jar.unlink()
    return sorted(p.name for p in where.glob("*.jar"))


def _pyspark() -> tuple[str, Path]:
    import pyspark

    return pyspark.__version__, Path(pyspark.__file__).parent / "jars"


def main(argv: list[str]) -> int:
    """For scripts/setup.sh: `maven` (the -D properties and the folder), `prune`, `check`."""
    version, spark_jars = _pyspark()
    artifact, delta_version = delta_for(version)
    hadoop = hadoop_version(spark_jars)
    if argv[:1] == ["maven"]:
        print(f"-Ddelta.artifact={artifact} -Ddelta.version={delta_version} "
              f"-Dhadoop.version={hadoop} -Daws.sdk.version={AWS_SDK} "
              f"-DoutputDirectory={folder()}")
    elif argv[:1] == ["wanted"]:
        print(f"io.delta:{artifact}:{delta_version} org.apache.hadoop:hadoop-aws:{hadoop}")
    elif argv[:1] == ["prune"]:
        kept = prune(folder(), spark_jars)
        (folder() / STAMP).write_text(f"io.delta:{artifact}:{delta_version}\n")
        print(f"{len(kept)} jars in {folder()} for pyspark {version}: {', '.join(kept)}")
    else:
        try:
            print(f"{len(delta_jars(version))} jars in {folder()} for pyspark {version}")
        except CdcError as exc:
            print(exc, file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
