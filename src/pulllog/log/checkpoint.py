"""Kafka's offset checkpoint files in the data directory: one offset per partition.

Two files use this format (Kafka's ``OffsetCheckpointFile``)::

    cleaner-offset-checkpoint         each compacted log's first dirty offset (cleaner.py)
    recovery-point-offset-checkpoint  each log's recovery point: everything below it was
                                      fsynced, so a crash need not rescan it (log.py)
    log-start-offset-checkpoint       each log's log start offset, where it is past the
                                      first segment's base offset (log.py)
    .kafka_cleanshutdown              the clean-shutdown marker: each log closed cleanly,
                                      with its log end offset (clean_shutdown.py)

Format, text, one item per line::

    0                     version
    2                     count of entries
    orders 0 1200         topic partition offset
    orders 1 1187

Topic names hold no space (Kafka's legal characters: letters, digits, ``.``, ``_``, ``-``),
so a space separates the fields. A missing file reads as empty; a damaged one (unknown
version, a count that does not match, a line that does not parse) raises
``CheckpointError`` and each caller decides what "no checkpoint" means for it: for the
cleaner everything is dirty again, for recovery everything is rescanned.

Writes are atomic: a temporary file in the same directory, fsync, rename over the old
file, fsync of the directory; a crash leaves either the old file or the new one (and
perhaps a stray ``.tmp``, which the next write replaces).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from .swap import fsync_dir

__all__ = [
    "CLEANER_CHECKPOINT_FILE",
    "LOG_START_OFFSET_CHECKPOINT_FILE",
    "RECOVERY_POINT_CHECKPOINT_FILE",
    "CheckpointError",
    "TopicPartition",
    "read_offsets",
    "write_offsets",
]

CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
RECOVERY_POINT_CHECKPOINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT_FILE = "log-start-offset-checkpoint"
VERSION = 0

TopicPartition = tuple[str, int]


class CheckpointError(ValueError):
    """A checkpoint file exists but does not parse."""


def read_offsets(path: Path) -> dict[TopicPartition, int]:
    """The file's entries; {} when it does not exist. Raises CheckpointError when damaged."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    lines = text.splitlines()
    try:
        if int(lines[0]) != VERSION:
            raise CheckpointError(f"{path.name}: unknown version {lines[0]!r}")
        count = int(lines[1])
        out: dict[TopicPartition, int] = {}
        for line in lines[2 : 2 + count]:
            topic, partition, offset = line.split(" ")
            out[(topic, int(partition))] = int(offset)
    except (ValueError, IndexError) as exc:
        if isinstance(exc, CheckpointError):
            raise
        raise CheckpointError(f"{path.name}: cannot parse ({exc})") from None
    if len(out) != count:
        raise CheckpointError(f"{path.name}: {len(out)} entries, {count} announced")
    return out


def write_offsets(path: Path, offsets: Mapping[TopicPartition, int]) -> None:
    """Replace the file atomically: temporary file, fsync, rename, fsync the directory."""
    lines = [str(VERSION), str(len(offsets))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(offsets.items())]
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)
