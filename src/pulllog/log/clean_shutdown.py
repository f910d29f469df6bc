"""The data directory's clean-shutdown marker, and one sync of the file system at a clean stop.

Kafka's LogManager keeps one marker per log directory, ``.kafka_cleanshutdown``, instead of
one per partition; so does the broker (broker/topics.py), and so a clean start reads no file
per partition to learn how it was stopped. pulllog's marker is a checkpoint file
(checkpoint.py's format) naming every partition it covers, with its log end offset at the
close::

    0                     version
    2                     count of entries
    orders 0 1200         topic partition log-end-offset
    orders 1 1187

Rules kept by its owner:

* Written last at a clean stop, once every log it names was closed (flushed) and the
  ``recovery-point-offset-checkpoint`` and ``log-start-offset-checkpoint`` files were
  written; a log whose close failed is not named, and without both checkpoints there is
  no marker. A crash before the marker's rename leaves no marker: every log is recovered.
* Read and removed (durably: unlinked, directory fsynced) at start before anything is
  written, so a crash at any later point can never look clean (Kafka: KAFKA-10471).
* A partition the marker does not name is recovered at start, as after a crash (a log
  created by hand, a log whose close failed, a damaged marker). One it names is opened
  lazily: its files are read on first use (log.py).
* Partitions the broker did not open (an offline topic, a start that stopped midway) keep
  the entries the marker had when the broker started: nothing of them was written.

``sync_file_system`` is the clean stop's one sync (``syncfs(2)``) for many dirty logs,
instead of an fsync per file; where the call is missing the logs fsync their files.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from .checkpoint import CheckpointError, TopicPartition, read_offsets, write_offsets
from .swap import fsync_dir

__all__ = ["CLEAN_SHUTDOWN_MARKER", "CleanShutdownError", "remove_marker", "sync_file_system", "take_marker",
           "write_marker"]

CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"


class CleanShutdownError(OSError):
    """The marker cannot be removed at start: serving could make a later crash look clean."""


def take_marker(data_dir: Path) -> tuple[dict[TopicPartition, int], str | None]:
    """Read the marker and remove it durably. Returns the partitions it covers (with their log
    end offsets) and, when it was there but damaged, why it was ignored. Raises
    ``CleanShutdownError`` when it cannot be removed."""
    path = data_dir / CLEAN_SHUTDOWN_MARKER
    problem = None
    try:
        covered = read_offsets(path)
    except (OSError, CheckpointError) as exc:
        covered, problem = {}, f"{CLEAN_SHUTDOWN_MARKER}: {exc}: ignored, every log is recovered"
    if path.exists() or path.is_symlink():
        remove_marker(data_dir)
    return covered, problem


def remove_marker(data_dir: Path) -> None:
    path = data_dir / CLEAN_SHUTDOWN_MARKER
    try:
        path.unlink(missing_ok=True)
        fsync_dir(data_dir)
    except OSError as exc:
        raise CleanShutdownError(
            exc.errno, f"cannot remove {path} ({exc.strerror}): a crash would then look like a clean "
            "shutdown; fix the directory's permissions or file system and start again") from None


def write_marker(data_dir: Path, covered: dict[TopicPartition, int]) -> None:
    """Write the marker atomically (temporary file, fsync, rename, fsync of the directory)."""
    write_offsets(data_dir / CLEAN_SHUTDOWN_MARKER, covered)


def sync_file_system(path: Path) -> bool:
    """``syncfs(2)`` of the file system holding ``path``: every write made before the call is
    on disk when it returns True. False where the call does not exist (the caller fsyncs each
    file instead); OSError when the file system reports a failed write back."""
    syncfs = _syncfs()
    if syncfs is None:
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        if syncfs(fd) != 0:
            import ctypes

            err = ctypes.get_errno()
            raise OSError(err, f"syncfs of {path}: {os.strerror(err)}")
    finally:
        os.close(fd)
    return True


def _syncfs() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # here, not at import: only a clean stop of many dirty logs needs it

    try:
        return ctypes.CDLL(None, use_errno=True).syncfs  # the C library the interpreter uses
    except (OSError, AttributeError):
        return None
