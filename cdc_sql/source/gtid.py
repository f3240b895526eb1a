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
from typing import Iterable

from cdc_sql.source.offsets import Position


@dataclass(frozen=True)
class GtidSet:
    """A MySQL GTID set, its intervals (inclusive) merged and sorted per server UUID, so equal
    sets compare equal and print the same (`uuid:1-5:7`, UUIDs in order)."""

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
        return cls.of(intervals)

    @classmethod
    def of(cls, intervals: dict[str, Iterable[tuple[int, int]]]) -> "GtidSet":
        merged: dict[str, tuple[tuple[int, int], ...]] = {}
        for uuid in sorted(intervals):
            out: list[list[int]] = []
            for low, high in sorted(intervals[uuid]):
                if out and low <= out[-1][1] + 1:
                    out[-1][1] = max(out[-1][1], high)
                else:
                    out.append([low, high])
            if out:
                merged[uuid] = tuple((low, high) for low, high in out)
        return cls(merged)

    def __contains__(self, gtid: str) -> bool:
        uuid, _, number = gtid.rpartition(":")
        n = int(number)
        return any(low <= n <= high for low, high in self.intervals.get(uuid.lower(), ()))

    def __or__(self, other: "GtidSet") -> "GtidSet":
        both = {u: [*self.intervals.get(u, ()), *other.intervals.get(u, ())]
                for u in {*self.intervals, *other.intervals}}
        return GtidSet.of(both)

    def __sub__(self, other: "GtidSet") -> "GtidSet":
        """The GTIDs of this set that `other` lacks."""
        left: dict[str, list[tuple[int, int]]] = {}
        for uuid, ranges in self.intervals.items():
            for low, high in ranges:
                for cut_low, cut_high in other.intervals.get(uuid, ()):
                    if cut_high < low or cut_low > high:
                        continue
                    if cut_low > low:
                        left.setdefault(uuid, []).append((low, cut_low - 1))
                    low = cut_high + 1
                    if low > high:
                        break
                if low <= high:
                    left.setdefault(uuid, []).append((low, high))
        return GtidSet.of(left)

    def __le__(self, other: "GtidSet") -> bool:
        return not (self - other)

    def __bool__(self) -> bool:
        return bool(self.intervals)

    def advanced(self, gtid) -> "GtidSet":
        """The set after a transaction with `gtid` (binlog_events.Gtid, `uuid:n`) committed."""
        uuid, _, number = gtid.text.rpartition(":")
        return self | GtidSet({uuid.lower(): ((int(number), int(number)),)})

    def __str__(self) -> str:
        return ",".join(uuid + "".join(f":{low}" if low == high else f":{low}-{high}"
                                       for low, high in ranges)
                        for uuid, ranges in self.intervals.items())


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
