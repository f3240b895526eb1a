"""MySQL GTID sets (`uuid:1-5:7,uuid2:1-3`) and the watermarks taken from them.

On MySQL with gtid_mode=ON a split's low watermark is `@@global.gtid_executed`, read just before
its snapshot starts: it holds committed transactions only, so every transaction in it is
visible to the SELECT (docs/architecture.md, "Watermarks"). The binlog reader then resolves that
set to a binlog offset: the start of the first transaction whose GTID is not in the set.
Transactions commit in binlog order (binlog_order_commits), so the set is a prefix of the binlog
and the offset is exact.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from cdc_sql.source.offsets import Position


@dataclass(frozen=True)
class GtidSet:
    intervals: dict[str, tuple[tuple[int, int], ...]]

    @classmethod
    def parse(cls, text: str) -> "GtidSet":
        intervals: dict[str, list[tuple[int, int]]] = {}
        for member in filter(None, (m.strip() for m in re.sub(r"\s+", "", text or "").split(","))):
            uuid, *ranges = member.split(":")
            if not ranges:
                raise ValueError(f"not a GTID set member: {member!r}")
            for part in ranges:
                low, _, high = part.partition("-")
                intervals.setdefault(uuid.lower(), []).append((int(low), int(high or low)))
        return cls({u: tuple(sorted(r)) for u, r in intervals.items()})

    def __contains__(self, gtid: str) -> bool:
        uuid, _, number = gtid.rpartition(":")
        n = int(number)
        return any(low <= n <= high for low, high in self.intervals.get(uuid.lower(), ()))


@dataclass
class GtidWatermarks:
    """Splits whose GTID watermark still needs a binlog offset, resolved as the reader goes."""

    pending: dict[str, GtidSet]
    resolved: dict[str, Position] = field(default_factory=dict)

    def observe(self, gtid: str, start: Position) -> None:
        """A transaction with `gtid` begins at `start`."""
        for name, executed in list(self.pending.items()):
            if gtid not in executed:
                self.resolved[name] = start
                del self.pending[name]

    def finish(self, end: Position) -> None:
        """The reader stopped at `end`: every transaction before it was in the remaining sets."""
        for name in list(self.pending):
            self.resolved[name] = end
            del self.pending[name]


@dataclass(frozen=True)
class MariaGtidState:
    """A MariaDB GTID position (`gtid_binlog_pos` form, `0-1-100,1-2-5`): the last GTID of
    every replication domain. A transaction with a later GTID of a domain is after it."""

    last: tuple[tuple[int, int, int], ...] = ()  # (domain, server_id, seq), by domain

    @classmethod
    def parse(cls, text: str) -> "MariaGtidState":
        found = {}
        for part in filter(None, (p.strip() for p in (text or "").split(","))):
            domain, server, seq = (int(x) for x in part.split("-"))
            found[domain] = (domain, server, seq)
        return cls(tuple(found[d] for d in sorted(found)))

    def advanced(self, gtid) -> "MariaGtidState":
        """The state after a transaction with `gtid` (binlog_events.Gtid) committed."""
        found = {d: (d, s, n) for d, s, n in self.last}
        found[gtid.domain] = (gtid.domain, gtid.server_id, gtid.seq)
        return MariaGtidState(tuple(found[d] for d in sorted(found)))

    def __str__(self) -> str:
        return ",".join(f"{d}-{s}-{n}" for d, s, n in self.last)
