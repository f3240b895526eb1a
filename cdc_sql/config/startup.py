"""The startup keys of a pipeline's source checked (where capture starts without a snapshot), and
the time `startup: timestamp` names."""
from __future__ import annotations

import datetime as dt
import re

from cdc_sql.config.loader import Document

# MariaDB: domain-server-seq[,...]; MySQL: a GTID set, uuid:1-5[:7-9][,uuid2:...]
_UUID = r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"
GTID_POSITION = re.compile(
    r"\d+-\d+-\d+(\s*,\s*\d+-\d+-\d+)*|"
    rf"{_UUID}(:\d+(-\d+)?)+(\s*,\s*{_UUID}(:\d+(-\d+)?)+)*")


def parse_timestamp(text: str) -> dt.datetime:
    """`2024-05-01 12:00:00` (UTC unless an offset is given) or epoch seconds."""
    text = str(text).strip()
    if text.replace(".", "", 1).isdigit():
        return dt.datetime.fromtimestamp(float(text), dt.timezone.utc)
    value = dt.datetime.fromisoformat(text)
    return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)


def check_startup(pipeline, doc: Document) -> None:
    """The startup keys of `source` agree with its startup mode and hold what they must."""
    source = pipeline.source
    needs = {"timestamp": "startup_timestamp", "offset": "startup_offset", "gtid": "startup_gtid"}
    for mode, key in needs.items():
        value = getattr(source, key)
        if source.startup == mode and not value:
            raise doc.error(f"startup: {mode} needs `{key}`", f"source.{key}")
        if value and source.startup != mode:
            raise doc.error(f"`{key}` is only for startup: {mode}", f"source.{key}")
    if source.startup_gtid and not GTID_POSITION.fullmatch(source.startup_gtid.strip()):
        raise doc.error(f"startup_gtid `{source.startup_gtid}` is neither a MariaDB GTID "
                        f"position (0-1-100,1-1-7) nor a MySQL GTID set (uuid:1-100)",
                        "source.startup_gtid")
    if source.startup_timestamp:
        try:
            parse_timestamp(source.startup_timestamp)
        except (ValueError, OverflowError, OSError):
            raise doc.error(f"`{source.startup_timestamp}` is not a time (write "
                            f"2024-05-01 12:00:00 in UTC, or epoch seconds)",
                            "source.startup_timestamp") from None
    if source.startup_offset and not re.fullmatch(r".+\.\d+:\d+", source.startup_offset):
        raise doc.error(f"`{source.startup_offset}` is not file:position (e.g. binlog.000003:1234)",
                        "source.startup_offset")
