"""Who reads a lake's tables for an engine in another process (lake.ReadsHere): delta-rs in
this process once it finds the engine's own tables there, the engine otherwise."""
import pytest

from cdc_sql.lake.lake import ReadsHere, same_lake
from cdc_sql.lake.tables import TableLayout, choose


@pytest.mark.parametrize("here, engine, shared", [
    ("id-1", "id-1", True),     # the same table: the same lake
    ("id-1", "id-2", False),    # another directory of that name (another machine's)
    ("id-1", None, False),      # only this process has it
    (None, "id-1", False),      # only the engine has it (not reachable from here)
    (None, None, None),         # neither: nothing known yet
])
def test_same_lake(here, engine, shared):
    assert same_lake(here, engine) is shared


@pytest.mark.parametrize("mode, path, chosen", [
    ("sail", "/lake", "delta-rs"), ("local", "s3://b/lake", "delta-rs"),
    ("remote", "/lake", "reads-here"), ("active", "s3://b/lake", "reads-here"),
    ("remote", "file:///lake", "reads-here"),
    ("remote", "dbfs:/lake", "spark"), ("local", "hdfs://nn/lake", "spark"),
])
def test_choose(mode, path, chosen):
    assert choose(mode, path) == chosen


class Tables:
    """A fake of either side: the table ids it finds, and the calls it was asked."""

    def __init__(self, ids, fails=(), unwritable=()):
        self.ids, self.fails, self.unwritable_paths, self.calls = ids, fails, unwritable, []

    def table_id(self, path):
        if path not in self.ids:
            raise FileNotFoundError(path)
        return self.ids[path]

    def unwritable(self, path):
        return ["deletionVectors"] if path in self.unwritable_paths else []

    def __getattr__(self, name):
        def call(path, *args):
            if (name, path) in self.fails:
                raise RuntimeError("cannot")
            self.calls.append((name, path))
            return name
        return call


def reads(here: Tables, engine: Tables) -> ReadsHere:
    tables = ReadsHere(None)
    tables._here, tables._spark = here, engine
    engine.table_id = lambda path: engine.ids.get(path)  # SparkTables: None when not there
    return tables


def test_reads_go_to_delta_rs_once_the_lake_is_the_engines():
    here, engine = Tables({"/l/a": "x"}), Tables({"/l/a": "x"})
    tables = reads(here, engine)
    assert tables.version("/l/a") == "version" and tables.history("/l/b", 3) == "history"
    tables.append_arrow("/l/a", [], None)  # changes: the engine's
    tables.read_arrow("/l/c")
    assert here.calls == [("version", "/l/a"), ("history", "/l/b"), ("read_arrow", "/l/c")]
    assert engine.calls == [("append_arrow", "/l/a")]


def test_reads_stay_with_the_engine_when_this_process_finds_another_table():
    here, engine = Tables({"/l/a": "x"}), Tables({"/l/a": "y"})
    tables = reads(here, engine)
    tables.exists("/l/a")
    tables.schema("/l/a")
    assert here.calls == [] and engine.calls == [("exists", "/l/a"), ("schema", "/l/a")]


def test_nothing_known_until_a_table_exists():
    here, engine = Tables({}), Tables({})
    tables = reads(here, engine)
    tables.exists("/l/a")
    assert tables._shared is None and engine.calls == [("exists", "/l/a")]
    here.ids["/l/b"] = engine.ids["/l/b"] = "z"
    tables.exists("/l/b")
    assert tables._shared is True and here.calls == [("exists", "/l/b")]


def test_the_engine_reads_what_delta_rs_cannot():
    here = Tables({"/l/a": "x"}, fails={("schema", "/l/a")}, unwritable={"/l/dv"})
    engine = Tables({"/l/a": "x"})
    tables = reads(here, engine)
    tables.schema("/l/a")         # delta-rs failed
    tables.read_arrow("/l/dv")    # rows of a table with deletion vectors
    tables.version("/l/dv")       # its log: delta-rs
    assert engine.calls == [("schema", "/l/a"), ("read_arrow", "/l/dv")]
    assert here.calls == [("version", "/l/dv")]


def test_layout_is_read_here_unless_the_table_has_the_clustering_feature(tmp_path):
    """Each run asks every table's layout (merge.lay_out): delta-rs reads it from the log, its
    clustering columns [] from the protocol of a table without the clustering feature (0.75 s
    of a Spark Connect DESCRIBE DETAIL on the cluster otherwise); a table with it is the
    engine's."""
    import json

    import pyarrow as pa
    from deltalake import write_deltalake

    from cdc_sql.lake.delta_rs_tables import DeltaRsTables

    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"n": [1, 2]}))
    here, engine = DeltaRsTables(), Tables({path: "x"})
    tables = reads(here, engine)
    tables._shared = True
    assert tables.layout(path) == TableLayout({}, [], []) and \
        tables.layout(str(tmp_path / "none")) is None
    (tmp_path / "t" / "_delta_log" / f"{1:020}.json").write_text(json.dumps({"protocol": {
        "minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": [],
        "writerFeatures": ["clustering", "domainMetadata"]}}) + "\n")
    with pytest.raises(NotImplementedError, match="liquid-clustered"):
        here.layout(path)
    assert tables.layout(path) == "layout"
    assert engine.calls == [("layout", path)]
