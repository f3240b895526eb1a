"""A lake's location: URLs stay URLs, local paths stay paths, no credentials in a URL."""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdc_sql.lake.lake import Lake
from cdc_sql.location import Location, redact, refused, storage


@pytest.mark.parametrize("text, url, kind", [
    ("s3://lake/shop", "s3://lake/shop", "s3"),
    ("s3://lake/shop/", "s3://lake/shop", "s3"),
    ("S3A://lake/x", "s3a://lake/x", "s3a"),
    ("gs://b/p", "gs://b/p", "gs"),
    ("abfss://c@acct.dfs.core.windows.net/p", "abfss://c@acct.dfs.core.windows.net/p", "abfss"),
    ("az://c/p", "az://c/p", "az"),
    ("dbfs:/mnt/lake", "dbfs:/mnt/lake", "dbfs"),
    ("file:///data/lake", "/data/lake", "local"),
    ("file:/data/lake/", "/data/lake", "local"),
    ("/data/lake/", "/data/lake", "local"),
    ("/", "/", "local"),
])
def test_a_location_keeps_urls_and_plain_paths(text, url, kind):
    place = Location.of(text)
    assert str(place) == url and place.storage == kind == storage(text)
    assert place.local == (kind == "local")


def test_joining_never_loses_a_slash():
    root = Location.of("s3://lake/shop")
    assert str(root / "silver" / "orders") == "s3://lake/shop/silver/orders"
    assert str(Location.of("s3://lake") / "_lock") == "s3://lake/_lock"
    lake = Lake(None, "s3://lake/shop/", None)
    assert lake.state_path == "s3://lake/shop/_state/checkpoint"
    assert lake.snapshot_path("db", "t") == "s3://lake/shop/bronze/_snapshot/db.t"
    assert Lake(None, "dbfs:/mnt/x", None).silver_path("o") == "dbfs:/mnt/x/silver/o"
    assert Lake(None, "/tmp/x", None).history_path("o") == "/tmp/x/silver/o_history"


def test_only_a_local_location_is_a_file_system_path(tmp_path):
    import os

    assert os.fspath(Location.of(tmp_path)) == str(tmp_path)
    with pytest.raises(TypeError, match="s3://lake/x is not a path on this machine"):
        os.fspath(Location.of("s3://lake/x"))


@pytest.mark.parametrize("url", [
    "s3://AKIAIOSFODNN7EXAMPLE:wJalrXUtnFEMI@bucket/lake",
    "s3://AKIAIOSFODNN7EXAMPLE:wJalr/XUtnFEMI@bucket/lake",  # a secret key may hold `/`
    "s3a://AKIAIOSFODNN7EXAMPLE@bucket/lake",
    "gs://key:secret@bucket/lake",
    "abfss://container:accountkey@acct.dfs.core.windows.net/lake",
    "az://c/lake?sv=2022&sig=abc",
    "s3://bucket/lake#frag",
])
def test_credentials_in_a_target_url_are_refused(url):
    problem = refused(url)
    assert problem is not None
    assert "secret" not in problem.replace("a secret in", "") and "abc" not in problem


@pytest.mark.parametrize("url", ["s3://bucket/lake", "/data/lake", "relative/lake",
                                 "abfss://container@acct.dfs.core.windows.net/lake",
                                 "dbfs:/mnt/lake", "gs://b", "s3://bucket/dir@x/lake"])
def test_plain_target_urls_are_accepted(url):
    assert refused(url) is None


def test_a_bucketless_object_store_url_is_refused():
    assert "names no bucket" in refused("s3:///lake")


def test_redact_takes_passwords_and_signatures_out_of_any_text():
    text = ("opening s3://AKIA:wJalr/XUtn@bucket/x and sc://host:15002/;token=abc123 and "
            "https://a.blob.core.windows.net/c?sv=1&sig=ZZZ and mysql://u:hunter2@db/x")
    shown = redact(text)
    for secret in ("wJalr", "abc123", "ZZZ", "hunter2"):
        assert secret not in shown
    assert "s3://***@bucket/x" in shown and "abfss://c@acct" in redact("abfss://c@acct/x")


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30))
def test_a_redacted_text_never_shows_a_url_password(secret):
    secret = "".join(c for c in secret if c not in "/@ \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0"
                     "\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
                     "\u200a\u2028\u2029\u202f\u205f\u3000") or "x"
    assert f":{secret}@" not in redact(f"see s3://user:{secret}@bucket/lake")


def test_a_pipeline_with_credentials_in_its_target_is_refused_without_repeating_them(tmp_path):
    from cdc_sql.config.model import load_pipeline
    from cdc_sql.errors import ConfigError

    file = tmp_path / "p.yaml"
    file.write_text("name: p\nsource:\n  host: h\n  user: u\n  server_id: 5\n"
                    "target:\n  path: s3://AKIAEXAMPLE:s3cr3t/key@bucket/lake\n"
                    "tables:\n  - name: t\n    source: db.t\n")
    with pytest.raises(ConfigError) as error:
        load_pipeline(file)
    assert f"{file}:7 at `target.path`: the URL holds credentials" in str(error.value)
    assert "s3cr3t" not in str(error.value) and "AKIAEXAMPLE" not in str(error.value)


def test_an_object_store_target_stays_a_url_in_the_pipeline(tmp_path):
    from cdc_sql.config.model import load_pipeline

    file = tmp_path / "p.yaml"
    file.write_text("name: p\nsource:\n  host: h\n  user: u\n  server_id: 5\n"
                    "target:\n  path: ${LAKE}\ntables:\n  - name: t\n    source: db.t\n")
    for written, root in (("s3://lake/shop/", "s3://lake/shop"), ("dbfs:/mnt/x", "dbfs:/mnt/x"),
                        ("rel/lake", str(tmp_path / "rel" / "lake"))):
        pipeline = load_pipeline(file, environ={"LAKE": written})
        assert str(pipeline.root) == root


def test_log_lines_never_carry_a_url_password():
    import logging

    from cdc_sql.cli import _redact

    record = logging.LogRecord("cdc_sql", logging.INFO, __file__, 1, "opening %s for %s",
                               ("s3://KEY:SECRET@bucket/lake", "run"), None)
    assert _redact(record)
    assert record.getMessage() == "opening s3://***@bucket/lake for run"


@pytest.mark.parametrize("text, said", [
    ("Generic S3 error: Error performing PUT http://127.0.0.1:9/b/_cdc_sql_probe/4b3404 in "
     "225ms, after 2 retries - HTTP error: error sending request", "cannot be reached"),
    ("Object at location p/x not found: Error performing PUT http://h/b/p/x - Server returned "
     "non-2xx status code: 404 Not Found: <?xml", "does not exist"),
    ("Generic S3 error: ... Server returned non-2xx status code: 403 Forbidden", "access denied"),
    ("Bulk delete request failed (code: 401)", "no valid credentials"),
])
def test_an_object_store_error_is_named_in_one_line(text, said):
    from cdc_sql.lake.objects import explain

    assert said in explain(RuntimeError(text + "\n\nDebug source: ..."))
    assert "Debug source" not in explain(RuntimeError(text + "\n\nDebug source: ..."))


@pytest.mark.parametrize("storage, setting", [
    ("s3", "AWS_ENDPOINT_URL"), ("s3a", "AWS_ENDPOINT_URL"),
    ("gs", "gcs_base_url of the GOOGLE_SERVICE_ACCOUNT key file"),
    ("abfss", "AZURITE_BLOB_STORAGE_URL"), ("az", "AZURE_STORAGE_ACCOUNT_NAME"),
])
def test_an_unreachable_endpoint_names_the_setting_of_its_store(storage, setting):
    from cdc_sql.lake.objects import explain

    said = explain(RuntimeError("Error performing PUT http://127.0.0.1:9/b/x - HTTP error: "
                                "error sending request"), storage)
    assert said.startswith("the endpoint cannot be reached (check ") and setting in said
