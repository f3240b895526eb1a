"""`cdc-sql init`: a starter pipeline read from the source, which `validate` accepts."""
import subprocess
import sys

import pytest

from cdc_sql.dev.mariadb import PASSWORD, USER

pytestmark = pytest.mark.integration


def cli(*args, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "cdc_sql.cli", *args], capture_output=True,
                          text=True, env=env, cwd=cwd)


def test_init_writes_a_starter_that_validates(mariadb, database, tmp_path, monkeypatch):
    mariadb.execute("CREATE TABLE orders (id INT PRIMARY KEY, amount DECIMAL(10,2))",
                    "CREATE TABLE `odd-name` (code CHAR(3) NOT NULL, UNIQUE KEY (code))",
                    "CREATE TABLE events (at DATETIME, what TEXT)", db=database)
    env = {"MYSQL_PASSWORD": PASSWORD, "PATH": "/usr/bin:/bin"}
    made = cli("init", f"mysql://{USER}@127.0.0.1:{mariadb.port}/{database}", env=env)
    assert made.returncode == 0, made.stderr
    text = made.stdout
    assert f"source: {database}.orders   # key: id" in text
    assert "`odd-name`" in text and \
        "primary_key: [code]   # the unique index code on NOT NULL columns: no primary key" in text
    assert "#   primary_key: [at]" in text and "events has no key" in made.stderr
    assert "GRANT SELECT ON" in text and "GRANT REPLICATION SLAVE" in text
    assert PASSWORD not in text and PASSWORD not in made.stderr
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(text)
    checked = cli("validate", str(pipeline), env=env)
    assert checked.returncode == 0, checked.stderr
    assert "orders" in checked.stdout and "odd_name" in checked.stdout
    assert "odd_name" in checked.stdout and "(key: code (declared primary_key" in checked.stdout


def test_init_only_takes_tables_matching_and_refuses_a_password_in_the_url(mariadb, database):
    mariadb.execute("CREATE TABLE a1 (id INT PRIMARY KEY)", "CREATE TABLE b1 (id INT PRIMARY KEY)",
                    db=database)
    env = {"MYSQL_PASSWORD": PASSWORD}
    made = cli("init", f"mysql://{USER}@127.0.0.1:{mariadb.port}/{database}", "--tables", "a.*",
               env=env)
    assert made.returncode == 0 and ".a1" in made.stdout and ".b1" not in made.stdout
    refused = cli("init", f"mysql://{USER}:{PASSWORD}@127.0.0.1:{mariadb.port}/{database}",
                  env=env)
    assert refused.returncode == 1 and "MYSQL_PASSWORD" in refused.stderr
    assert PASSWORD not in refused.stderr


def test_the_starter_for_the_demo_database_validates(tmp_path):
    """The demo's own `shop` database, on a server of its own (the name is fixed)."""
    from cdc_sql.dev.demo import load_sample
    from cdc_sql.dev.mariadb import MariaDB

    with MariaDB() as server:
        load_sample(server, customers=5, orders=20)
        env = {"MYSQL_PASSWORD": PASSWORD, "PATH": "/usr/bin:/bin"}
        made = cli("init", f"mysql://{USER}@127.0.0.1:{server.port}/shop", env=env)
        assert made.returncode == 0, made.stderr
        assert "shop.customers" in made.stdout and "shop.orders" in made.stdout
        pipeline = tmp_path / "shop.yaml"
        pipeline.write_text(made.stdout)
        checked = cli("validate", str(pipeline), env=env)
        assert checked.returncode == 0, checked.stderr
