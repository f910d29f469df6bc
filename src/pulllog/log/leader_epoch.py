"""A replicated partition's leader-epoch cache: the offset at which each leader epoch began.

Kept in the partition directory as ``leader-epoch-checkpoint``, Kafka's format::

    0               version
    2               count of entries
    0 0             epoch startOffset
    3 1200          (epochs 1 and 2 wrote nothing: no entry)

Rules (Kafka's ``LeaderEpochFileCache``):

* Entries are strictly increasing in both epoch and start offset. An entry is added when a
  leader takes over (its epoch, starting at the log end offset) and when a follower appends a
  batch stamped with an epoch newer than the latest; an entry that would break the order
  replaces the entries it conflicts with (a follower's history rewritten by truncation).
* ``end_offset_for(epoch, log_end)`` answers OffsetsForLeaderEpoch: for the latest epoch,
  the log end offset; otherwise the start offset of the first epoch above the one asked
  for, with the largest epoch at or below it (or the asked epoch itself when the cache
  starts above it); (-1, -1) when the asked epoch is above every known one or unknown.
* Truncation of the log removes the entries from the truncation offset on
  (``truncate_from_end``).
* Every change rewrites the file (temporary file, fsync, rename): changes come with leader
  elections and truncations, never per append. A missing file reads as empty; a damaged
  one too (the replica then truncates to its high watermark, as Kafka does without a cache).
* Except a new leader's own entry (``assign(..., flush=False)``): it counts once it is in
  memory, and the file is written by ``flush()`` later, off the event loop (a broker that
  takes over ~50 partitions at once must not do 50 fsyncs before the first one leads). Kafka
  4.1 defers the write of a truncation the same way (KAFKA-15046: in memory at once, written
  by the scheduler); its ``assign`` still writes in the caller's thread, which in Kafka is
  not the one serving requests. The log's close flushes it too, so a clean restart has
  it, and so does a flush of the log before it moves the recovery point (log.py): an
  entry starting below the recovery point is always in the file. The cache counts as dirty
  until a write of its newest change has succeeded: a write under way or failed leaves it
  dirty, so that flush waits for the write under way (it holds the writer's lock) and
  writes the entries itself if that one failed, rather than trusting a write that may
  never land. A crash before the write leaves the previous file (the rename is atomic); the log's recovery, which walks every
  batch from the recovery point, then assigns each epoch above the cache's latest from the
  first batch stamped with it and drops the entries starting at or past the recovered log
  end, as Kafka's LogLoader does (``Log._recover_leader_epochs``).
* Single-broker logs never make one: their batches keep what the producer wrote there
  (-1, or 0 from most clients), which is no leader's stamp.
"""

from __future__ import annotations

import logging
import os
import threading
from bisect import bisect_left, bisect_right
from pathlib import Path

__all__ = ["LEADER_EPOCH_CHECKPOINT_FILE", "UNDEFINED_EPOCH", "UNDEFINED_OFFSET", "LeaderEpochCache"]

LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1
_VERSION = 0

log = logging.getLogger(__name__)


class LeaderEpochCache:
    """The (epoch, start offset) entries of one partition, persisted on every change."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / LEADER_EPOCH_CHECKPOINT_FILE
        self._epochs: list[int] = []
        self._starts: list[int] = []
        # Every change bumps ``_generation``; ``_written`` is the generation the file holds
        # (set only once a write succeeded), so a change made while a write is under way, or
        # a write that failed, leaves the cache dirty.
        self._generation = 0
        self._written = 0
        # ``_state`` guards the entries against a snapshot taken by a flushing thread;
        # ``_writing`` keeps two writers from sharing the temporary file.
        self._state = threading.Lock()
        self._writing = threading.Lock()
        self._load()

    def _load(self) -> None:
        try:
            lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            return
        try:
            if int(lines[0]) != _VERSION:
                raise ValueError(f"unknown version {lines[0]!r}")
            count = int(lines[1])
            entries = [tuple(int(v) for v in line.split(" ")) for line in lines[2:2 + count]]
            if len(entries) != count or any(len(e) != 2 for e in entries):
                raise ValueError("the count does not match the entries")
        except (ValueError, IndexError) as exc:
            log.warning("%s: ignored, cannot parse (%s)", self.path, exc)
            return
        for epoch, start in entries:
            self._epochs.append(epoch)
            self._starts.append(start)

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._starts))

    @property
    def latest_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    @property
    def dirty(self) -> bool:
        """A change is in memory but not in the file yet, or its write has not succeeded
        yet (``flush()`` writes it, or waits for the write under way)."""
        return self._generation != self._written

    def assign(self, epoch: int, start_offset: int, *, flush: bool = True) -> None:
        """Epoch ``epoch`` begins at ``start_offset`` (a no-op when it is known already).
        ``flush=False``: only in memory until ``flush()`` (module docstring)."""
        if epoch < 0 or (self._epochs and self._epochs[-1] == epoch and self._starts[-1] <= start_offset):
            return
        with self._state:
            # Drop what the new entry contradicts: a newer-or-equal epoch, or a start at or past its own.
            keep = len(self._epochs)
            while keep and (self._epochs[keep - 1] >= epoch or self._starts[keep - 1] >= start_offset):
                keep -= 1
            del self._epochs[keep:], self._starts[keep:]
            self._epochs.append(epoch)
            self._starts.append(start_offset)
            self._generation += 1
        if flush:
            self.flush()

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was truncated to ``end_offset``: forget the epochs that start at or after it."""
        keep = bisect_left(self._starts, end_offset)
        if keep < len(self._starts):
            with self._state:
                del self._epochs[keep:], self._starts[keep:]
                self._generation += 1
            self.flush()

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) as OffsetsForLeaderEpoch answers for ``epoch`` (module docstring)."""
        if epoch < 0 or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if epoch == self._epochs[-1]:
            return epoch, log_end_offset
        higher = bisect_right(self._epochs, epoch)
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if higher == 0:
            return epoch, self._starts[0]
        return self._epochs[higher - 1], self._starts[higher]

    def clear(self) -> None:
        if self._epochs:
            with self._state:
                self._epochs.clear()
                self._starts.clear()
                self._generation += 1
            self.flush()

    def flush(self) -> None:
        """Write the entries if a change is not in the file yet (temporary file, fsync,
        rename). Safe from any thread: the newest entries win, whoever writes them."""
        with self._writing:  # a write under way finishes first; then this one sees its result
            with self._state:
                generation = self._generation
                if generation == self._written:
                    return
                entries = list(zip(self._epochs, self._starts))
            self._write(entries)  # on failure stays dirty: the next flush tries again
            with self._state:
                self._written = generation

    def _write(self, entries: list[tuple[int, int]]) -> None:
        lines = [str(_VERSION), str(len(entries))] + [f"{e} {s}" for e, s in entries]
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w") as out:
            out.write("\n".join(lines) + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self.path)
