"""The hand-written copy a user could run instead of cdc-sql's first load, as its own process
(interpreter, imports and all, as `cdc-sql run` pays them): connectorx with 2 partitions on
the key, Arrow straight into one delta-rs table.
`copy_child PORT TABLE TARGET [CHUNK_ROWS]`: with CHUNK_ROWS, key ranges of that many rows are
read and appended one after the other (a table larger than memory; the keys are 1..N)."""
import json
import sys
import time

import connectorx
from deltalake import write_deltalake

from cdc_sql.dev.mariadb import PASSWORD, USER


def main(port: str, table: str, target: str, chunk: str = "0") -> None:
    started = time.perf_counter()
    url = f"mysql://{USER}:{PASSWORD}@127.0.0.1:{port}/bench"
    step, low, rows = int(chunk), 1, 0
    while True:
        where = f" WHERE id BETWEEN {low} AND {low + step - 1}" if step else ""
        data = connectorx.read_sql(url, f"SELECT * FROM bench.{table}{where}",
                                   partition_on="id", partition_num=2, return_type="arrow")
        if data.num_rows == 0 and rows:
            break
        write_deltalake(target, data, mode="append")
        rows += data.num_rows
        if not step:
            break
        low += step
    print(json.dumps({"rows": rows, "seconds": time.perf_counter() - started}))


if __name__ == "__main__":
    main(*sys.argv[1:])
