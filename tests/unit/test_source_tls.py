"""Which TLS options share one context that holds no CA certificate (it checks none)."""
import ssl

import pytest

from cdc_sql.config.model import Tls
from cdc_sql.source.mysql import unverified, unverified_context


@pytest.mark.parametrize("tls, shared", [
    (Tls(), True),  # pymysql offers TLS if the server has it: its options are {}
    (Tls(required=True), True),
    (Tls(required=True, verify_identity=True), True),  # no CA: nothing to check it against
    (Tls(ca="ca.pem"), False),
    (Tls(ca="ca.pem", verify_identity=True), False),
    (Tls(cert="client.pem", key="client-key.pem"), False),
])
def test_options_without_a_ca_or_a_certificate_share_the_unverified_context(tls, shared):
    assert unverified(tls.pymysql() or {}) is shared


def test_the_unverified_context_checks_nothing_and_loads_no_ca():
    context = unverified_context()
    assert context.verify_mode == ssl.CERT_NONE and not context.check_hostname
    assert context.cert_store_stats()["x509_ca"] == 0
    default = ssl.create_default_context()  # what pymysql starts from: nothing weaker
    assert (context.options, context.minimum_version) == (default.options, default.minimum_version)
