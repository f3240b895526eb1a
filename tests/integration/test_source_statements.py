"""Source statements are the source's: capture keeps only those of the captured tables, without
their literals and comments, and logs none (docs/security.md)."""
import logging

import pytest
from deltalake import DeltaTable

from cdc_sql.lake.lake import Lake
from tests.integration.helpers import assert_silver_equals, run

pytestmark = pytest.mark.integration


def test_statements_are_kept_only_for_captured_tables_and_without_literals(
        mariadb, database, engine, make_pipeline, caplog):
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1)",
                    db=database)
    pipeline = make_pipeline(f"- name: t\n  source: {database}.t")
    run(pipeline, engine)
    user = f"u_{database}"
    with caplog.at_level(logging.DEBUG):
        mariadb.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY 'hunter2-user'",  # in the db
                        f"GRANT SELECT ON {database}.* TO '{user}'@'%'",
                        f"ALTER USER '{user}'@'%' IDENTIFIED BY 'hunter2-altered'",
                        "CREATE TABLE other (id INT PRIMARY KEY, s VARCHAR(20) DEFAULT "
                        "'hunter2-other')",
                        "RENAME TABLE other TO other2",  # sqlglot cannot read it
                        "ALTER TABLE t ADD COLUMN note VARCHAR(20) COMMENT 'hunter2-comment' "
                        "/* hunter2-block */",
                        "ALTER TABLE t ALTER COLUMN note SET DEFAULT 'hunter2-default'",
                        "INSERT INTO t (id) VALUES (2)", db=database)
        run(pipeline, engine)
    mariadb.execute(f"DROP USER '{user}'@'%'")
    statements = Lake(None, str(pipeline.root), None).statements_path
    kept = [r["statement"] for r in DeltaTable(statements).to_pyarrow_table().to_pylist()
            if r["op"] == "ddl"]
    assert "ALTER TABLE t ADD COLUMN note VARCHAR(20) COMMENT '?'" in kept
    assert "ALTER TABLE t ALTER COLUMN note SET DEFAULT '?'" in kept
    assert not any("hunter2" in s or "USER" in s or "GRANT" in s for s in kept), kept
    assert "hunter2" not in caplog.text
    assert_silver_equals(engine, pipeline, "t", mariadb, f"SELECT * FROM {database}.t")
