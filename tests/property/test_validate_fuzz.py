"""Fuzz: `cdc-sql validate --offline` over generated and mutated pipeline files (random keys and
types, YAML features, byte garbage), in this process. Every case ends within a time bound,
exits 0 (valid) or 1, and prints exactly one line that is not a warning, naming the file; every
warning names it too. Never a traceback, never `unexpected` (a bug), never a second line.
"""
from __future__ import annotations

import contextlib
import io
import math
import signal
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from cdc_sql.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "pipelines"
SEEDS = [p.read_bytes() for p in sorted(EXAMPLES.glob("*.yaml"))]
SECONDS = 10  # per case; a case takes milliseconds
FUZZ = settings(max_examples=200, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.large_base_example])


class Hang(BaseException):
    """Raised by the alarm: a case that does not end."""


def validate(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "pipeline.yaml"
        path.write_bytes(content)
        out, err = io.StringIO(), io.StringIO()

        def expired(*_):
            raise Hang(f"validate did not end within {SECONDS} s")

        previous = signal.signal(signal.SIGALRM, expired)
        signal.setitimer(signal.ITIMER_REAL, SECONDS)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = main(["validate", "--offline", str(path)])
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        lines = (out.getvalue() + err.getvalue()).splitlines()
        said = [line for line in lines if not line.startswith("warning: ")]
        assert len(said) == 1, (content[:300], lines)
        assert all(str(path) in line for line in lines), (content[:300], lines)
        assert not said[0].startswith("cdc-sql: unexpected ") and "a bug in cdc-sql" not in \
            said[0] and "Traceback" not in said[0], (content[:300], said)
        assert (code, said[0].endswith("source not checked)")) in ((0, True), (1, False)), \
            (code, said)


# -- generated pipelines ------------------------------------------------------------------------
KEYS = ["name", "source", "target", "tables", "engine", "host", "port", "user", "password",
        "password_file", "ssl", "ca", "server_id", "startup", "startup_timestamp",
        "startup_offset", "chunk_size", "parallelism", "binlog_batch_seconds",
        "verify_timeout_seconds", "path", "catalog", "schema", "retention_hours", "mode", "url",
        "projection", "primary_key", "history", "key_unique_across_shards", "snapshot_reader",
        "on_purged_binlog", "x", "Name", "", "tables[0]", "a.b"]
TEXTS = st.sampled_from([
    "shop.orders", "shop\\.orders_[0-9]+", "(", "${MYSQL_PASSWORD}", "${UNSET:-x}", "${A}${B}",
    "${", "$", "SELECT id FROM orders", "SELECT id, @@hostname AS h FROM orders",
    "SELECT id FROM orders FOR UPDATE", "SELECT * FROM orders WHERE id > :upto",
    "SELECT id, @env:HOME AS h FROM orders", "SELECT id, reflect('a', 'b') AS r FROM orders",
    "DELETE FROM orders", "SELECT id FROM orders; DROP TABLE x", "timestamp", "initial",
    "2024-05-01 12:00:00", "binlog.000003:4", "sail", "remote", "sc://x", "./lake", "./secret",
    "s3://bucket/lake", "", " ", "\t", "é😀", "a\nb", "\x00", "\x1b[31m", "null", "~", "yes",
])
SCALARS = st.one_of(
    TEXTS, st.text(max_size=30), st.integers(-2**70, 2**70), st.booleans(), st.none(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, -1, 65535, 65536, 2**32, 2**63, math.inf, -math.inf, math.nan]),
)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=8)), inner, max_size=6)),
    max_leaves=25)


@st.composite
def pipelines(draw) -> dict:
    """A pipeline-shaped mapping: the real sections, some keys right, some random."""
    section = lambda keys: st.dictionaries(  # noqa: E731
        st.sampled_from(keys) | st.text(max_size=6), VALUES, max_size=len(keys))
    document = {
        "name": draw(VALUES | st.just("p")),
        "source": draw(section(["host", "port", "user", "password", "password_file", "ssl",
                                "server_id", "startup", "startup_timestamp", "chunk_size",
                                "binlog_batch_seconds", "verify_timeout_seconds",
                                "snapshot_reader"]) | VALUES),
        "target": draw(section(["path", "catalog", "schema", "parallelism", "retention_hours"])
                       | VALUES),
        "tables": draw(st.lists(section(["name", "source", "projection", "primary_key",
                                         "history", "key_unique_across_shards"]), max_size=3)
                       | VALUES),
    }
    for key in draw(st.lists(st.sampled_from(list(document) + ["engine", "extra"]),
                             max_size=2)):
        if draw(st.booleans()):
            document.pop(key, None)
        else:
            document[key] = draw(VALUES)
    return document


def dump(document) -> bytes:
    try:
        return yaml.safe_dump(document, allow_unicode=True).encode("utf-8", "surrogatepass")
    except (yaml.YAMLError, UnicodeEncodeError):
        return repr(document).encode("utf-8", "surrogatepass")


@FUZZ
@given(pipelines())
def test_generated_pipelines(document):
    validate(dump(document))


# -- YAML features --------------------------------------------------------------------------------
FEATURES = [
    b"&a ", b"*a", b"&a [*a]", b"<<: *a\n", b"!!python/name:os.system ", b"!!python/object:x {}",
    b"!foo ", b"!!binary ", b"!!int ", b"!!float ", b"!!timestamp ", b"!!set ", b"!!omap ",
    b"!!str ", b"? ", b"--- \n", b"...\n", b"%YAML 1.1\n---\n", b"%TAG ! tag:x,2000:\n---\n",
    b"{", b"}", b"[", b"]", b"[" * 200, b"{a: " * 100, b"- " * 100, b"|\n", b">-\n", b"\"",
    b"'", b"\\", b"#", b"\t", b"\r", b"\r\n", b"\xef\xbb\xbf", b"\x00", b"\x07", b"\x85",
    b"\xc3", b"\xff\xfe", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b".nan", b".inf", b"-.inf",
    b"0x1F", b"0o17", b"0b101", b"1_000", b"12:30:00", b"2024-02-30", b"2024-05-01 12:00:00",
    b"1e400", b"99999999999999999999999", b"~", b"null", b"yes", b"on", b"${", b"${HOME}",
    b"${A:-b}", b"\n  ", b": ", b"- ", b", ",
]


@st.composite
def mutated(draw) -> bytes:
    """A shipped example with pieces cut, repeated, swapped, or YAML features and bytes
    put in."""
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(["feature", "bytes", "cut", "repeat", "truncate", "line"]))
        if kind == "feature":
            data[at:at] = draw(st.sampled_from(FEATURES))
        elif kind == "bytes":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "cut":
            del data[at:at + draw(st.integers(1, 40))]
        elif kind == "repeat":
            data[at:at] = data[at:at + draw(st.integers(1, 80))] * draw(st.integers(1, 4))
        elif kind == "truncate":
            del data[at:]
        else:  # a whole line moved elsewhere
            lines = data.split(b"\n")
            line = lines.pop(draw(st.integers(0, len(lines) - 1)))
            lines.insert(draw(st.integers(0, len(lines))), line)
            data = bytearray(b"\n".join(lines))
    return bytes(data)


@FUZZ
@given(mutated())
def test_mutated_examples(content):
    validate(content)


@FUZZ
@given(st.lists(st.sampled_from(FEATURES) | st.binary(max_size=6), max_size=30))
def test_yaml_features_and_byte_garbage(pieces):
    validate(b"".join(pieces))


def test_the_shipped_examples_themselves():
    for seed in SEEDS:
        validate(seed)
