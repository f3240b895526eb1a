"""TLS to the source: a server that requires client certificates, a pipeline with `ssl`."""
import subprocess
import textwrap

import pytest

from cdc_sql.cli import main
from cdc_sql.config.model import Source, Tls, load_pipeline
from cdc_sql.dev.mariadb import PASSWORD, USER, MariaDB
from cdc_sql.source import result_rows
from cdc_sql.source.mysql import Connection, cursor
from tests.integration.helpers import assert_silver_equals, checkpoint, run

pytestmark = pytest.mark.integration


def _openssl(*args: str, cwd) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _certificates(folder, ca: str = "ca") -> None:
    """A CA, and a server and a client certificate it signed (the server's names 127.0.0.1)."""
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
             f"/CN=cdc-sql test {ca}", "-keyout", f"{ca}-key.pem", "-out", f"{ca}.pem", cwd=folder)
    for name in ("server", "client"):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout",
                 f"{name}-key.pem", "-out", f"{name}.csr", cwd=folder)
        (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey",
                 f"{ca}-key.pem", "-CAcreateserial", "-days", "2", "-out", f"{name}.pem",
                 "-extfile", "san.ext", cwd=folder)


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tls")
    _certificates(folder)
    flags = [f"--ssl-ca={folder / 'ca.pem'}", f"--ssl-cert={folder / 'server.pem'}",
             f"--ssl-key={folder / 'server-key.pem'}"]
    with MariaDB(extra_flags=flags) as server:
        server.execute("CREATE USER tls_user@'%' IDENTIFIED BY 'tls-secret' REQUIRE X509",
                       "GRANT SELECT, REPLICATION SLAVE, BINLOG MONITOR, REPLICATION MASTER "
                       "ADMIN ON *.* TO tls_user@'%'",
                       "CREATE DATABASE shop")
        server.execute("CREATE TABLE items (id INT PRIMARY KEY, v VARCHAR(20))",
                       "INSERT INTO items SELECT seq, CONCAT('v', seq) FROM seq_1_to_3000",
                       db="shop")
        yield server, folder


def _pipeline(tmp_path, server, ssl: str, certs):
    path = tmp_path / "pipeline.yaml"
    (tmp_path / "password").write_text("tls-secret\n")
    for name in ("ca.pem", "client.pem", "client-key.pem"):
        (tmp_path / name).write_bytes((certs / name).read_bytes())
    path.write_text(textwrap.dedent(f"""\
        name: tls
        source:
          host: 127.0.0.1
          port: {server.port}
          user: tls_user
          password_file: password
          server_id: 7100
        {ssl}
        target:
          path: lake
        tables:
          - name: items
            source: shop.items
        """))
    return path


def test_a_pipeline_over_tls_with_a_client_certificate(tls_server, tmp_path, engine):
    server, certs = tls_server
    ssl = "  ssl: {ca: ca.pem, cert: client.pem, key: client-key.pem, verify_identity: true}"
    pipeline = load_pipeline(_pipeline(tmp_path, server, ssl, certs))
    run(pipeline, engine)
    # the snapshot read its 3,000 rows in the binary protocol, on pymysql's TLS connection
    assert {s.reader for s in checkpoint(engine, pipeline).splits("shop.items")} == \
        ({"binary"} if result_rows.available() else {"pymysql"})
    server.execute("UPDATE shop.items SET v = 'over tls' WHERE id % 7 = 0",
                   "DELETE FROM shop.items WHERE id % 11 = 0",
                   "INSERT INTO shop.items VALUES (5000, 'new')")
    run(pipeline, engine)
    assert_silver_equals(engine, pipeline, "items", server, "SELECT * FROM shop.items")


def test_without_tls_the_error_points_at_ssl(tls_server, tmp_path, capsys):
    server, certs = tls_server
    assert main(["validate", str(_pipeline(tmp_path, server, "", certs))]) == 1
    message = capsys.readouterr().err
    assert "access denied for tls_user@127.0.0.1" in message
    assert "source.ssl" in message and "tls-secret" not in message


def test_a_server_certificate_from_another_ca_is_refused(tls_server, tmp_path, capsys):
    server, certs = tls_server
    other = tmp_path / "other"
    other.mkdir()
    _certificates(other, ca="ca")
    path = _pipeline(tmp_path, server, "  ssl: {ca: other/ca.pem, cert: client.pem, "
                     "key: client-key.pem}", certs)
    assert main(["validate", str(path)]) == 1
    message = capsys.readouterr().err
    assert "TLS" in message and "certificate" in message and "source.ssl.ca" in message
    assert not (tmp_path / "lake").exists()


@pytest.mark.parametrize("tls", [Tls(), Tls(required=True)], ids=["no ssl", "required"])
def test_without_a_ca_the_connection_is_encrypted_by_the_shared_context(tls_server, tls):
    server, _ = tls_server
    source = Source(host="127.0.0.1", port=server.port, user=USER, password=PASSWORD, ssl=tls)
    with cursor(source) as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        assert cur.fetchone()[1], "not encrypted"
        assert cur.connection.ctx is Connection._unverified
