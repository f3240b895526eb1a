"""Hostile and broken pipeline files and `init` arguments: each gets one line that names the
file (and the line and key where there is one), within a time bound; no traceback, nothing
`unexpected`, and no value from the environment repeated (docs/security.md)."""
import contextlib
import os
import signal
import textwrap

import pytest

from cdc_sql.cli import main
from cdc_sql.config.model import load_pipeline
from cdc_sql.errors import ConfigError, redacted
from tests.unit import test_config

# test_config's pipeline, without its port and projection: every line number below is its own
GOOD = test_config.GOOD.replace("  port: ${PORT:-3307}\n", "").split("    projection:")[0]


@contextlib.contextmanager
def deadline(seconds: float):
    """Fail instead of hanging: SIGALRM interrupts a loop that never ends."""
    def expired(*_):
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def write(tmp_path, content, name="p.yaml"):
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(textwrap.dedent(content))
    return path


def validate(tmp_path, capsys, content, *, code=1, env=None) -> str:
    """`validate --offline` in this process: the one line it prints."""
    path = write(tmp_path, content)
    with deadline(10), _environ(env or {}):
        assert main(["validate", "--offline", str(path)]) == code
    out = capsys.readouterr()
    lines = (out.out + out.err).splitlines()
    assert len(lines) == 1, lines
    assert str(path) in lines[0] and "unexpected" not in lines[0], lines[0]
    return lines[0]


@contextlib.contextmanager
def _environ(values: dict):
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# -- hangs and crashes ------------------------------------------------------------------------
@pytest.mark.parametrize("content, fragment", [
    ("", "missing required key `name`"),
    ("# only a comment\n", "missing required key `name`"),
    ("name: x\n", "missing required key `source`"),
    (GOOD.split("tables:")[0], "missing required key `tables`"),
])
def test_a_missing_top_level_key_is_named_at_once(tmp_path, capsys, content, fragment):
    assert fragment in validate(tmp_path, capsys, content)


@pytest.mark.parametrize("content, fragment", [
    ("name: " + "[" * 20000, "nested more than 32 levels"),
    ("a: &a [*a]\n", "aliases (*a) are not allowed"),
    ("a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
     "c: [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n", "aliases (*a) are not allowed"),
    ("name: x\nsource: {<<: &base {host: a}}\n", "aliases (*base) are not allowed"),
])
def test_deep_nesting_and_aliases_are_refused_with_their_line(tmp_path, capsys, content,
                                                              fragment):
    line = validate(tmp_path, capsys, content + ("" if "<<" not in content else
                                                 "target: {<<: *base}\n"))
    assert fragment in line and ".yaml:" in line


@pytest.mark.parametrize("content, fragment", [
    (b"name: caf\xe9\n", "p.yaml:1: invalid YAML: byte 0xE9 is not UTF-8"),
    (b"name: x\nsource: \x01\n", "p.yaml:2: invalid YAML: the non-printable character U+0001"),
    ("name: !!python/name:os.system x\n", "p.yaml:1: invalid YAML: the YAML tag "
                                          "`!!python/name:os.system` is not allowed"),
    ("name: !foo bar\n", "the YAML tag `!foo` is not allowed"),
    ("name: !!binary aGk=\n", "the YAML tag `!!binary` is not allowed"),
    ("name: x\nsource:\n  port: !!int abc\n", "p.yaml:3 at `source.port`: `abc` is not a "
                                              "valid !!int"),
    ("? [a, b]\n: c\n", "p.yaml:1: a key must be plain text"),
    ('"a\\nb": 1\n', "unknown key `a\\nb`"),  # one line, the break shown escaped
])
def test_bytes_tags_and_control_characters(tmp_path, capsys, content, fragment):
    assert fragment in validate(tmp_path, capsys, content)


def endless(tmp_path, name: str) -> str:
    """A named pipe that gives up to 64 MB, as /dev/zero gives without end: a reader that does
    not stop early is seen, without taking the machine's memory when it does not."""
    import threading

    path = tmp_path / name
    os.mkfifo(path)

    def feed() -> None:
        with contextlib.suppress(OSError), open(path, "wb") as pipe:
            for _ in range(64):
                pipe.write(b"x" * 2**20)

    threading.Thread(target=feed, daemon=True).start()
    return str(path)


def test_a_huge_file_or_a_device_is_not_read_forever(tmp_path, capsys):
    with deadline(10):
        assert main(["validate", "--offline", endless(tmp_path, "p.yaml")]) == 1
    assert "larger than 4 MB" in capsys.readouterr().err


@pytest.mark.parametrize("value", [".nan", ".inf", ".NaN", "-.inf"])
def test_not_a_number_and_infinity_are_refused(tmp_path, capsys, value):
    line = validate(tmp_path, capsys,
                    GOOD.replace("  user: cdc\n", f"  user: cdc\n  verify_timeout_seconds: "
                                                  f"{value}\n"))
    assert "p.yaml:5 at `source.verify_timeout_seconds`: expected a finite number" in line


@pytest.mark.parametrize("written, parsed", [
    ("2024-05-01 12:00:00", "2024-05-01 12:00:00+00:00"),
    ("2024-05-01T12:00:00Z", "2024-05-01 12:00:00+00:00"),
    ("2024-05-01", "2024-05-01 00:00:00+00:00"),
    ("'2024-05-01 12:00:00'", "2024-05-01 12:00:00+00:00"),
])
def test_startup_timestamp_takes_a_yaml_timestamp(tmp_path, written, parsed):
    from cdc_sql.config.startup import parse_timestamp

    text = GOOD.replace("  user: cdc\n", f"  user: cdc\n  startup: timestamp\n"
                                         f"  startup_timestamp: {written}\n")
    source = load_pipeline(write(tmp_path, text), environ={"PW": "x"}).source
    assert str(parse_timestamp(source.startup_timestamp)) == parsed


def test_text_keys_take_what_was_written(tmp_path):
    """YAML 1.1 types 0123 as an octal number and `yes` as true: a text key wants the text."""
    text = GOOD.replace("  user: cdc", "  user: 0123").replace("host: db.internal", "host: yes")
    source = load_pipeline(write(tmp_path, text), environ={"PW": "x"}).source
    assert (source.user, source.host) == ("0123", "yes")


@pytest.mark.parametrize("value", ["99999999999999999999", "1e400"])
def test_an_epoch_too_large_is_not_a_time(tmp_path, capsys, value):
    line = validate(tmp_path, capsys, GOOD.replace(
        "  user: cdc\n", f"  user: cdc\n  startup: timestamp\n  startup_timestamp: {value}\n"))
    assert "is not a time" in line


# -- the environment and secrets ----------------------------------------------------------------
@pytest.mark.parametrize("password", ["${UNSET:-hunter2}", "'${EMPTY:-}hunter2'",
                                      "${PW}hunter2", "x${PW}"])
def test_a_password_comes_wholly_from_one_variable(tmp_path, password):
    with pytest.raises(ConfigError) as info:
        load_pipeline(write(tmp_path, GOOD.replace("${PW}", password)),
                      environ={"PW": "x", "EMPTY": ""})
    assert info.value.path == "source.password" and "hunter2" not in str(info.value)
    assert "wholly from one variable" in str(info.value)


def test_operators_limit_the_variables_a_pipeline_reads(tmp_path):
    env = {"PW": "x", "AWS_SECRET_ACCESS_KEY": "AKIA-very-secret",
           "CDC_SQL_PIPELINE_VARIABLES": "PW, CDC_*"}
    text = GOOD.replace("  user: cdc", "  user: ${AWS_SECRET_ACCESS_KEY}")
    with pytest.raises(ConfigError) as info:
        load_pipeline(write(tmp_path, text), environ=env)
    assert info.value.path == "source.user" and "AKIA" not in str(info.value)
    assert "${AWS_SECRET_ACCESS_KEY} is not among the variables" in str(info.value)
    allowed = text.replace("${AWS_SECRET_ACCESS_KEY}", "${CDC_USER}")
    assert load_pipeline(write(tmp_path, allowed), environ={**env, "CDC_USER": "u"}).source.user \
        == "u"


def test_a_value_from_the_environment_is_never_repeated(tmp_path):
    env = {"PW": "x", "SECRET_TOKEN": "tok-0123456789abcdef"}
    port = GOOD.replace("  user: cdc\n", "  user: cdc\n  port: ${SECRET_TOKEN}\n")
    with pytest.raises(ConfigError) as info:
        load_pipeline(write(tmp_path, port), environ=env)
    assert "tok-0123" not in str(info.value)
    assert "got ${SECRET_TOKEN} (from the environment)" in str(info.value)
    # a connection error repeating the user (the server's own message) shows the variable
    user = GOOD.replace("  user: cdc", "  user: ${SECRET_TOKEN}")
    source = load_pipeline(write(tmp_path, user), environ=env).source
    import pymysql

    from cdc_sql.source import mysql

    error = mysql.explain(pymysql.err.OperationalError(
        1045, f"Access denied for user '{source.user}'@'10.0.0.1' (using password: YES)"), source)
    assert "tok-0123" not in str(error) and "${SECRET_TOKEN}@db.internal" in str(error)
    assert "tok-0123" not in redacted(f"anything at all with {source.user} in it")


def test_offline_validation_warns_of_unset_connection_variables(tmp_path, capsys):
    text = GOOD.replace("host: db.internal", "host: ${DB_HOST}")
    path = write(tmp_path, text)
    assert main(["validate", "--offline", str(path)]) == 0
    out = capsys.readouterr()
    assert out.out == f"{path}: valid (1 tables; source not checked)\n"
    assert out.err.splitlines() == [
        f"warning: {path}:3 at `source.host`: ${{DB_HOST}} is not set: not checked offline "
        f"(a run needs it)",
        f"warning: {path}:5 at `source.password`: ${{PW}} is not set: not checked offline "
        f"(a run needs it)"]
    # everything else is still checked
    assert "unknown key `hots`" in validate(tmp_path, capsys, text + "hots: x\n")
    # a run needs them
    with pytest.raises(ConfigError, match=r"\$\{DB_HOST\} is not set"):
        load_pipeline(path, environ={"PW": "x"})


def test_the_shipped_filtered_example_validates_offline_without_its_secret(capsys,
                                                                           monkeypatch):
    from pathlib import Path

    monkeypatch.delenv("MYSQL_PASSWORD", raising=False)
    example = Path(__file__).resolve().parents[2] / "pipelines" / "filtered.yaml"
    assert main(["validate", "--offline", str(example)]) == 0
    assert "${MYSQL_PASSWORD} is not set" in capsys.readouterr().err


# -- password files -----------------------------------------------------------------------------
def with_password_file(tmp_path) -> str:
    return GOOD.replace("  password: ${PW}\n", "  password_file: secret\n")


def test_a_password_file_others_can_read_is_a_warning(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("from-the-file\n")
    secret.chmod(0o644)
    pipeline = load_pipeline(write(tmp_path, with_password_file(tmp_path)), environ={})
    assert pipeline.source.password == "from-the-file"
    (warning,) = pipeline.warnings
    assert "p.yaml:5 at `source.password_file`" in warning and "mode 0644" in warning
    secret.chmod(0o600)
    assert load_pipeline(tmp_path / "p.yaml", environ={}).warnings == ()


@pytest.mark.parametrize("content, fragment", [
    (b"\xff\xfepassword\n", "is not UTF-8 text"),
    (b"x" * (64 * 1024 + 1), "is not a password file (more than 64 KB)"),
])
def test_a_password_file_must_be_a_short_text(tmp_path, content, fragment):
    (tmp_path / "secret").write_bytes(content)
    (tmp_path / "secret").chmod(0o600)
    with pytest.raises(ConfigError) as info:
        load_pipeline(write(tmp_path, with_password_file(tmp_path)), environ={})
    assert info.value.path == "source.password_file" and fragment in str(info.value)


def test_a_device_as_a_password_file_is_refused_at_once(tmp_path):
    text = GOOD.replace("  password: ${PW}\n", f"  password_file: "
                                               f"{endless(tmp_path, 'secret')}\n")
    with deadline(10), pytest.raises(ConfigError, match="not a password file"):
        load_pipeline(write(tmp_path, text), environ={})


# -- init -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, fragment", [
    (["init", "mysql://cdc@host:99999/db"], "Port out of range"),
    (["init", "mysql://cdc@host:port/db"], "could not be cast to integer"),
    (["init", "mysql://cdc@[::1/db"], "Invalid IPv6 URL"),
    (["init", "http://u:hunter2@host/db"], "not in the URL (http://***@host/db)"),
    (["init", "mysql://:hunter2@host/db"], "not in the URL (mysql://***@host/db)"),
    (["init", "ftp://u:hunter2@[::1/db"], "ftp://***@[::1/db"),
    (["init", "mysql://cdc@127.0.0.1:1/db", "--tables", "("], "--tables '(' is not a regular"),
])
def test_init_arguments(capsys, args, fragment):
    assert main(args) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("cdc-sql: init: ")
    assert fragment in err and "hunter2" not in err and "unexpected" not in err


def test_sqlglot_warnings_do_not_reach_the_log(tmp_path, capsys):
    """sqlglot warns, with the statement, when it falls back to a Command: a source statement
    (CREATE USER with its password) or a projection must not reach the log that way."""
    text = GOOD + "    projection: CREATE USER 'x'@'%' IDENTIFIED BY 'hunter2-pw'\n"
    line = validate(tmp_path, capsys, text)
    assert "expected `SELECT ... FROM <table>`" in line and "hunter2" not in line


def test_python_warnings_do_not_reach_the_user(tmp_path):
    """A source pattern Python warns about (`[[`, a FutureWarning) and any library warning:
    the command prints its one line only."""
    import subprocess
    import sys

    path = write(tmp_path, GOOD.replace("source: shop.orders", "source: shop\\.[[x]"))
    done = subprocess.run([sys.executable, "-m", "cdc_sql.cli", "validate", "--offline",
                           str(path)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PW": "x", "PYTHONWARNINGS": "default"})
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout == f"{path}: valid (1 tables; source not checked)\n"


def _yaml_texts():
    """YAML texts of nested mappings, lists and scalars, some cut or spliced with the marks
    that make YAML refuse or mean more (aliases, tags, flow brackets, tabs, quotes)."""
    from hypothesis import strategies as st

    scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8),
                        st.floats(allow_nan=False))
    trees = st.recursive(scalars, lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
        max_leaves=12)
    marks = st.sampled_from(["*a", "&a ", "!!python/name:os.system ", "!x ", "[", "{", "\t",
                             "'", '"', ": ", "- ", "\n  ", "#", "? ", "%YAML 1.1\n---\n"])
    return st.builds(lambda tree, cut, mark: _spliced(yaml_text(tree), cut, mark), trees,
                     st.floats(0, 1), st.one_of(st.just(""), marks))


def yaml_text(tree) -> str:
    import yaml

    return yaml.safe_dump(tree, default_flow_style=False)


def _spliced(text: str, cut: float, mark: str) -> str:
    at = int(len(text) * cut)
    return text[:at] + mark + text[at:]


def test_libyaml_reads_what_pyyaml_reads_and_refuses_what_it_refuses():
    """A pipeline file is composed by libyaml when PyYAML has it (config/loader.py): the same
    values and lines as PyYAML's own composer, or the same refusal in PyYAML's words; but
    for a tab within a line, which YAML allows as a separator and PyYAML's scanner refuses
    (`- 0<tab>`), and libyaml takes. (libyaml marks an empty node that ends the text on the
    line after it: lines are at most the text's last.)"""
    import yaml
    from hypothesis import example, given, settings

    from cdc_sql.config import loader

    def read(compose, text):
        try:
            node = compose(text)
        except yaml.YAMLError as exc:
            return "refused", str(exc)
        doc = loader.Document("p.yaml", {}, {})
        try:
            values = loader._Values(doc, {}, None, True, text.count("\n") + 1).value(
                node, "") if node else None
        except ConfigError as exc:
            return "refused", str(exc)
        return values, doc.lines

    @settings(max_examples=500, deadline=None)
    @given(_yaml_texts())
    @example("'0': null\n? ")  # an empty key ending the text: libyaml marks it past the end
    def same(text):
        here, python = read(loader._composed, text), read(
            lambda t: yaml.compose(t, Loader=loader._Loader), text)
        if here[0] != "refused" and python[0] == "refused":
            assert "\t" in text and "cannot start any token" in python[1]
            return
        assert here == python

    assert yaml.__with_libyaml__  # (the project's PyYAML wheel has it)
    same()
