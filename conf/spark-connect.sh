#!/usr/bin/env bash
# cdc-sql against a Spark Connect server (Spark 4 with Delta Lake), e.g. one started with:
#   $SPARK_HOME/sbin/start-connect-server.sh \
#     --packages io.delta:delta-spark_4.1_2.13:4.4.0 \
#     --properties-file conf/spark-defaults.conf
# (the tests start one over a standalone cluster: cdc_sql/dev/spark_cluster.py)
# The target path must be one the server can write (s3://, abfss://, or a path it shares with
# this machine). Schedule the batch mode (cron, Airflow, ...) and let one run at a time:
# the pipeline's lock refuses a second one.
set -euo pipefail
PIPELINE="${1:?usage: conf/spark-connect.sh PIPELINE.yaml [sc://host:15002]}"
URL="${2:-sc://localhost:15002}"
export MYSQL_PASSWORD="${MYSQL_PASSWORD:?set MYSQL_PASSWORD (the pipeline reads \${MYSQL_PASSWORD})}"
cdc-sql run "$PIPELINE" --until-caught-up --engine remote --engine-url "$URL"
cdc-sql status "$PIPELINE" --engine remote --engine-url "$URL"
