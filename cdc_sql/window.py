"""A window of changes, the value planner.py hands to the merge (lake/silver/): the bronze
changes in (P, U] of one silver table and, with the first batch, a re-snapshot or a new
shard, the snapshot splits merged with them (planner.py has the rules)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class SplitRef:
    """A done split as a silver window carries it: which bronze rows are its own (its id, and
    the attempt that wrote them) and the watermark they stand at."""

    split_id: int
    attempt: str | None
    watermark: str | None

    @property
    def row(self) -> tuple[int, str | None, str | None]:
        """As a row of the done-splits view (split_id INT, attempt STRING, watermark STRING)."""
        return self.split_id, self.attempt, self.watermark


Splits = dict[str, tuple[SplitRef, ...]]  # source table -> its done splits


@dataclass(frozen=True)
class Window:
    after: str                    # P: changes after it ("" for the first batch)
    upto: str                     # U: changes up to it, a transaction boundary
    splits: Splits | None = None  # snapshot splits merged with the window
    first: bool = False           # the first batch: silver is created from the snapshot rows
    history_start: str | None = None  # first batch with history: where history begins
    idle: bool = False            # nothing to merge: only P moves to U
    replace: bool = False         # a re-snapshot: silver is replaced, in one commit
    replaced: bool = False        # ... which a killed run did already: merged again instead
    # History has no commit of ours since state recorded it (no attempt of this window reached
    # it): its MERGE matches current versions only. Else every version (a replay's versions
    # may have been closed already).
    history_untouched: bool = False
    # Range re-reads merged with the window: (source table, predicate, watermark, read at)
    # each; silver removes its rows matching one that the read did not return, at its watermark
    # and with its time (UTC, ISO 8601; "" in state written before it was kept)
    ranges: tuple[tuple[str, str, str, str], ...] = ()
    ranged: int = -1              # the highest range re-read's split id merged so far
