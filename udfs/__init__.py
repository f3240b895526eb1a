"""Python UDFs that cdc-sql registers into its Spark SQL sessions (none are needed yet).

Add a function to `UDFS` as name -> (function, Spark return type) and projections may call it;
keep them deterministic: a replayed change must give the same silver row.
"""
UDFS: dict = {}


def register(spark) -> None:
    for name, (function, return_type) in UDFS.items():
        spark.udf.register(name, function, return_type)
