"""What reaches the user when a command fails: one line, never a traceback."""
import pytest

from cdc_sql import cli
from cdc_sql.errors import SourceError


def failing(exc):
    def handler(args):
        raise exc
    return handler


@pytest.mark.parametrize("exc, expected", [
    (SourceError("cannot connect to cdc@db:3306"), "cdc-sql: cannot connect to cdc@db:3306\n"),
    (RuntimeError("deep inside\nmore lines"),
     "cdc-sql: unexpected RuntimeError: deep inside (a bug in cdc-sql: please report it with "
     "the output of the same command run with -v)\n"),
])
def test_one_line_per_failure(exc, expected, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(cli, "_validate", failing(exc))
    assert cli.main(["validate", str(tmp_path / "p.yaml")]) == 1
    err = capsys.readouterr().err
    assert err == expected


def test_verbose_shows_the_traceback_of_a_bug(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(cli, "_validate", failing(KeyError("x")))
    assert cli.main(["-v", "validate", str(tmp_path / "p.yaml")]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and err.endswith("run with -v)\n")
