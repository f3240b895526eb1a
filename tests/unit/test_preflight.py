"""Binlog retention against the snapshot estimate; the grants a pipeline needs."""
from cdc_sql.source.preflight import (needed_grants, retention_seconds, retention_warning,
                                      snapshot_estimate)


def test_retention_from_either_variable():
    assert retention_seconds({"binlog_expire_logs_seconds": "3600", "expire_logs_days": "0"}) == 3600
    assert retention_seconds({"binlog_expire_logs_seconds": "0", "expire_logs_days": "2"}) == 172800
    assert retention_seconds({"expire_logs_days": "0.5"}) == 43200  # MySQL 8.4 has no days
    assert retention_seconds({"binlog_expire_logs_seconds": "0", "expire_logs_days": "0"}) is None


def test_estimate_scales_with_readers():
    assert snapshot_estimate(1_000_000, 10_000, 4) == 25.0


def test_short_retention_warns_with_what_is_needed():
    # 36M rows at 1,000 rows/s with 2 readers: 5 hours; needed 2 x 5h + 1h = 11h
    warning = retention_warning(3600, 36_000_000, 1_000, 2)
    assert "binlog retention is 1h00m" in warning
    assert "36,000,000 rows" in warning and "5h00m" in warning
    assert "at least 11h00m" in warning and "binlog_expire_logs_seconds = 39600" in warning


def test_enough_or_no_retention_is_quiet():
    assert retention_warning(39600, 36_000_000, 1_000, 2) is None
    assert retention_warning(None, 10**12, 1, 1) is None


def test_grants_by_flavour_and_startup():
    mariadb = [g for g, _ in needed_grants("cdc", True, "initial", ["shop", "crm"])]
    assert mariadb == ["GRANT SELECT ON `shop`.* TO 'cdc'@'%'",
                       "GRANT SELECT ON `crm`.* TO 'cdc'@'%'",
                       "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'cdc'@'%'",
                       "GRANT REPLICATION MASTER ADMIN ON *.* TO 'cdc'@'%'"]
    mysql = [g for g, _ in needed_grants("cdc", False, "snapshot-only", ["shop"])]
    assert mysql == ["GRANT SELECT ON `shop`.* TO 'cdc'@'%'",
                     "GRANT REPLICATION CLIENT ON *.* TO 'cdc'@'%'"]


def test_foreign_key_rules_are_read_from_show_create_table():
    from cdc_sql.source.preflight import constraint_rules

    create = """CREATE TABLE `e``x` (
  `id` int(11) NOT NULL,
  `code` varchar(12) DEFAULT NULL,
  `a)b` int(11) DEFAULT NULL,
  PRIMARY KEY (`id`),
  CONSTRAINT `fk_all` FOREIGN KEY (`code`) REFERENCES `accounts` (`code`) ON DELETE CASCADE ON UPDATE CASCADE,
  CONSTRAINT `fk_null` FOREIGN KEY (`a)b`) REFERENCES `p` (`id`) ON DELETE SET NULL,
  CONSTRAINT `odd``name` FOREIGN KEY (`id`) REFERENCES `db`.`p` (`id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"""
    assert constraint_rules(create) == {"fk_all": ("CASCADE", "CASCADE"),
                                        "fk_null": ("RESTRICT", "SET NULL"),
                                        "odd`name": ("RESTRICT", "RESTRICT")}
