import textwrap
from pathlib import Path

import pytest

from cdc_sql.cli import main
from cdc_sql.config.model import load_pipeline
from cdc_sql.errors import ConfigError

SHOP = Path(__file__).resolve().parents[2] / "pipelines" / "shop.yaml"

GOOD = """\
name: shop
source:
  host: db.internal
  user: cdc
  password: ${PW}
  port: ${PORT:-3307}
target:
  path: ./lake
tables:
  - name: orders
    source: shop.orders
    projection: SELECT id, amount FROM orders WHERE amount > 0
"""


def write(tmp_path, text: str) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def error_for(tmp_path, text: str, environ=None) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_pipeline(write(tmp_path, text), environ={"PW": "s3cret"} if environ is None else environ)
    return info.value


def test_shop_pipeline_is_valid_offline():
    pipeline = load_pipeline(SHOP, environ={}, offline=True)
    (warning,) = pipeline.warnings  # no secret where an analyst's check runs: a warning
    assert "shop.yaml:10 at `source.password`: ${MYSQL_PASSWORD} is not set" in warning
    assert [t.name for t in pipeline.tables] == ["customers", "orders", "big_orders"]
    assert pipeline.source.port == 3306 and pipeline.source.startup == "initial"


def test_interpolation_defaults_and_relative_target(tmp_path):
    pipeline = load_pipeline(write(tmp_path, GOOD), environ={"PW": "s3cret"})
    assert pipeline.source.password == "s3cret"
    assert pipeline.source.port == 3307
    assert pipeline.target.path == str((tmp_path / "lake").resolve())
    assert "s3cret" not in repr(pipeline)


def test_unset_variable_names_it(tmp_path):
    err = error_for(tmp_path, GOOD, environ={})
    assert err.path == "source.password" and err.line == 5 and "${PW}" in str(err)


def test_bad_yaml_syntax_names_file_and_line(tmp_path):
    err = error_for(tmp_path, "name: x\nsource: [1, 2\ntarget: {}\n")
    assert "invalid YAML" in str(err) and str(tmp_path / "p.yaml") in str(err)
    assert err.line is not None


def test_unknown_key_names_path_and_line(tmp_path):
    err = error_for(tmp_path, GOOD.replace("  user: cdc\n", "  user: cdc\n  hots: x\n"))
    assert err.path == "source.hots" and err.line == 5
    assert "unknown key `hots`" in str(err) and "host" in str(err)


@pytest.mark.parametrize("typo, meant", [("hots", "host"), ("chunksize", "chunk_size"),
                                         ("Parallelism", "parallelism"),
                                         ("server-id", "server_id")])
def test_an_unknown_key_suggests_the_nearest_known_one(tmp_path, typo, meant):
    err = error_for(tmp_path, GOOD.replace("  user: cdc\n", f"  user: cdc\n  {typo}: 1\n"))
    assert f"unknown key `{typo}`, did you mean `{meant}`?" in str(err)


def test_an_unknown_key_like_no_known_one_suggests_nothing(tmp_path):
    err = error_for(tmp_path, GOOD.replace("  user: cdc\n", "  user: cdc\n  zzz: 1\n"))
    assert "did you mean" not in str(err)


def test_unknown_key_in_table_list(tmp_path):
    err = error_for(tmp_path, GOOD + "    colour: red\n")
    assert err.path == "tables[0].colour" and err.line == 13


def test_missing_host(tmp_path):
    err = error_for(tmp_path, GOOD.replace("  host: db.internal\n", ""))
    assert err.path == "source.host" and "missing required key `host`" in str(err)


@pytest.mark.parametrize("key, value, message", [
    ("port", "seventy", "expected a whole number"),
    ("port", "70000", "at most 65535"),
    ("startup", "sometimes", "must be one of initial"),
    ("chunk_size", "-1", "at least 0"),
])
def test_wrong_values(tmp_path, key, value, message):
    text = GOOD.replace("  user: cdc\n", f"  user: cdc\n  {key}: {value}\n")
    text = text.replace("  port: ${PORT:-3307}\n", "") if key == "port" else text
    err = error_for(tmp_path, text)
    assert err.path == f"source.{key}" and message in str(err)


def test_password_value_never_shown(tmp_path):
    err = error_for(tmp_path, GOOD.replace("${PW}", "[hunter2]"))
    assert "hunter2" not in str(err) and err.path == "source.password"


def test_projection_syntax_error_has_position(tmp_path):
    err = error_for(tmp_path, GOOD.replace("WHERE amount > 0", "WHERE amount >"))
    assert err.path == "tables[0].projection" and "syntax error" in str(err)
    assert "line 1, column" in str(err)


def test_duplicate_table_names(tmp_path):
    err = error_for(tmp_path, GOOD + "  - name: orders\n    source: shop.x\n")
    assert err.path == "tables[1].name" and "used twice" in str(err)


def test_history_name_taken(tmp_path):
    err = error_for(tmp_path, GOOD + "    history: true\n  - name: orders_history\n"
                              "    source: shop.x\n")
    assert err.path == "tables[0].history" and "tables[1] already uses" in str(err)


def test_key_unique_across_shards_needs_shards(tmp_path):
    err = error_for(tmp_path, GOOD + "    key_unique_across_shards: true\n")
    assert err.path == "tables[0].key_unique_across_shards" and "regular-expression" in str(err)


def test_bad_regex(tmp_path):
    err = error_for(tmp_path, GOOD.replace("source: shop.orders", "source: shop\\.orders_[0-9"))
    assert err.path == "tables[0].source" and "regular expression" in str(err)


def test_pattern_must_match_whole_name():
    from cdc_sql.config.model import Table

    table = Table(name="o", source=r"shop\.orders_[0-9]+")
    assert table.matches("shop", "orders_12")
    assert not table.matches("shop", "orders_2_old")
    assert not table.matches("shop2", "orders_1")


def test_matching_finds_what_matches_finds():
    """`matching` (literal sources by lookup) lists, per table, exactly the names its `matches`
    accepts, in the order given: case-insensitive literals, backticks, patterns."""
    from hypothesis import given, strategies as st

    from cdc_sql.config.model import Table, matching

    name = st.sampled_from(["a", "A", "b", "a.b", "x`y", "orders_1", "Orders_2"])
    source = st.sampled_from(["a.b", "A.B", "`a.b`.a", "`x``y`.b", r"a\.orders_[0-9]+",
                              r"(?i)a\..*", "b.orders_1"])

    @given(st.lists(source, max_size=4), st.lists(st.tuples(name, name), max_size=12))
    def check(sources, names):
        specs = [Table(name=f"t{i}", source=s) for i, s in enumerate(sources)]
        assert matching(specs, names) == [[n for n in names if spec.matches(*n)]
                                          for spec in specs]

    check()


def test_cli_validate_offline_exit_codes(tmp_path, capsys):
    good = GOOD
    assert main(["validate", "--offline", str(write(tmp_path, good))]) == 0
    bad = write(tmp_path, good.replace("  user: cdc\n", "  user: cdc\n  hots: x\n"))
    assert main(["validate", "--offline", str(bad)]) == 1
    message = capsys.readouterr().err
    assert "source.hots" in message and str(bad) in message and ":5" in message


def test_cli_usage_error_exits_2():
    with pytest.raises(SystemExit) as info:
        main(["frobnicate"])
    assert info.value.code == 2


def test_password_from_a_file_relative_to_the_pipeline(tmp_path):
    (tmp_path / "secret").write_text("from-the-file\n")
    text = GOOD.replace("  password: ${PW}\n", "  password_file: secret\n")
    assert load_pipeline(write(tmp_path, text), environ={}).source.password == "from-the-file"
    (tmp_path / "secret").unlink()
    err = error_for(tmp_path, text)
    assert err.path == "source.password_file" and "cannot read" in str(err)


def test_tls_files_resolved_and_checked(tmp_path):
    (tmp_path / "ca.pem").write_text("pem")
    text = GOOD.replace("  user: cdc\n", "  user: cdc\n  ssl: {ca: ca.pem}\n")
    source = load_pipeline(write(tmp_path, text), environ={"PW": "p"}).source
    assert source.ssl.ca == str(tmp_path / "ca.pem")
    assert source.ssl.pymysql() == {"ca": str(tmp_path / "ca.pem"), "check_hostname": False}
    err = error_for(tmp_path, text.replace("ca.pem", "missing.pem"))
    assert err.path == "source.ssl.ca" and "no such file" in str(err)
    err = error_for(tmp_path, text.replace("{ca: ca.pem}", "{ca: ca.pem, cert: ca.pem}"))
    assert err.path == "source.ssl.key" and "go together" in str(err)
    err = error_for(tmp_path, text.replace("  user: cdc\n", "  user: cdc\n  snapshot_reader: native\n"))
    assert err.path == "source.snapshot_reader" and "TLS" in str(err)
    plain = load_pipeline(write(tmp_path, GOOD), environ={"PW": "p"}).source
    assert plain.ssl.pymysql() is None


@pytest.mark.parametrize("key, old, new", [
    ("tables[0].projection", "SELECT id, amount FROM orders WHERE amount > 0",
     "SELECT id, '${MYSQL_PASSWORD}' AS s FROM orders"),
    ("tables[0].source", "source: shop.orders", "source: shop.${TABLE}"),
    ("tables[0].name", "- name: orders", "- name: ${NAME}"),
    ("name", "name: shop", "name: ${NAME}"),
])
def test_the_environment_reaches_only_connection_and_path_keys(tmp_path, key, old, new):
    """Analysts edit projections and table names; the environment holds the job's secrets."""
    err = error_for(tmp_path, GOOD.replace(old, new, 1), {
        "PW": "x", "MYSQL_PASSWORD": "hunter2", "TABLE": "orders", "NAME": "orders"})
    assert err.path == key and "hunter2" not in str(err)
    assert "only the keys that configure connections and paths" in str(err)


def test_connection_and_path_keys_take_the_environment(tmp_path):
    from cdc_sql.config.loader import INTERPOLATED

    text = GOOD.replace("  path: ./lake", "  path: ${LAKE:-./lake}")
    assert load_pipeline(write(tmp_path, text), environ={"PW": "x"}).target.path.endswith("lake")
    assert {"source.host", "source.password", "target.path", "engine.url"} <= set(INTERPOLATED)


@pytest.mark.parametrize("example", sorted(SHOP.parent.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_pipeline_is_valid(example):
    pipeline = load_pipeline(example, environ={"MYSQL_PASSWORD": "x"})
    assert pipeline.tables


def test_engine_conf_takes_spark_settings_as_text(tmp_path):
    text = GOOD + ("engine:\n  mode: local\n  conf:\n    spark.sql.catalogImplementation: hive\n"
                   "    spark.sql.shuffle.partitions: 4\n    spark.sql.ansi.enabled: true\n")
    pipeline = load_pipeline(write(tmp_path, text), environ={"PW": "s3cret"})
    assert pipeline.engine.conf == {"spark.sql.catalogImplementation": "hive",
                                    "spark.sql.shuffle.partitions": "4",
                                    "spark.sql.ansi.enabled": "true"}
    assert load_pipeline(write(tmp_path, GOOD), environ={"PW": "s3cret"}).engine.conf == {}


@pytest.mark.parametrize("conf, key, message", [
    ("3", "engine.conf", "expected a mapping, got int"),
    ("{javax.jdo.option.ConnectionURL: x}", "engine.conf.javax.jdo.option.ConnectionURL",
     "is not a Spark setting"),
    ("{spark.a: [1]}", "engine.conf.spark.a", "expected text, a number or true/false, got a list"),
    ("{spark.a: }", "engine.conf.spark.a", "expected text, a number or true/false, got nothing"),
    ("{spark.hadoop.javax.jdo.option.ConnectionPassword: pw}",
     "engine.conf.spark.hadoop.javax.jdo.option.ConnectionPassword", "holds a secret"),
    ("{spark.a: '${PW}'}", "engine.conf.spark.a", "reads the job's environment"),
])
def test_engine_conf_refuses_what_is_no_spark_setting(tmp_path, conf, key, message):
    error = error_for(tmp_path, GOOD + f"engine:\n  mode: local\n  conf: {conf}\n")
    assert error.path == key and message in str(error)
