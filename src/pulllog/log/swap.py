"""The segment swap: how cleaned segments replace old ones, crash-safely.

The protocol. For each group, with ``B`` the group's base offset::

    step                                        on disk after the step     Log.open finds
    1 write B.log/.index/.timeindex.cleaned,    old segments, *.cleaned    the old log: it
      fsync                                                                deletes *.cleaned
    2 rename .cleaned -> .swap, the .log last;  old segments, *.swap       a committed swap,
      fsync the directory                                                  and finishes it
    3 rename the old segments' files to         some old segments, *.swap  the same (it
      *.deleted                                                            deletes *.deleted)
    4 rename .swap -> final, the .log last      B.index..., B.log.swap     the same
    5 Log.replace_segments(old, [new])          memory only
    6 fsync the directory, unlink *.deleted     B.log...                   the new log

``B.log.swap`` is the commit point. To finish a swap (``complete_interrupted_swaps``, run by
``Log.open``), the swap file's offset range [B, next offset) is read; every old segment
whose base offset falls in it is deleted (the swap holds all that was kept of them), the
indexes at B are dropped, ``B.log.swap`` becomes ``B.log`` and ``Log.open`` rebuilds its
indexes; ``B.txnindex.swap`` (the old segments' aborted transactions, copied) becomes
``B.txnindex``. An index ``.swap`` without a ``.log.swap`` never committed and is deleted. Old
segments past the swap's range (possible when the cleaned tail lost every record) stay:
their records were only superseded, so the log is still correct, just less compacted.

Step 2 is :func:`commit_cleaned`, steps 3-4 :func:`swap_files`; the cleaner runs 1 and 2
in its worker process, 3-5 on the Log's owner (renames only, no fsync: a crash before
step 6 finishes the swap at the next open) and 6 on its thread. Dropping a committed swap whose old segments
are untouched (``LogSegment.delete`` of the ``.swap`` files) is safe too.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

from ..records.batch import BATCH_HEADER_SIZE, read_header
from ..records.errors import InvalidRecordError
from .segment import LogSegment, parse_segment_name, segment_name

__all__ = ["CLEANED_SUFFIX", "SWAP_SUFFIX", "commit_cleaned", "complete_interrupted_swaps", "fsync_dir",
           "remove_segment_files", "swap_files"]

logger = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
_SEGMENT_FILES = (".log", ".index", ".timeindex", ".txnindex")


def commit_cleaned(directory: Path, cleaned: LogSegment) -> None:
    """Step 2: ``cleaned`` (written as ``*.cleaned`` and fsynced) becomes a committed swap."""
    cleaned.rename_suffix(CLEANED_SUFFIX, SWAP_SUFFIX)  # renames the .log last: the commit point
    fsync_dir(directory)


def swap_files(old: Sequence[LogSegment], cleaned: LogSegment) -> list[Path]:
    """Steps 3-4, renames only; returns the old segments' ``*.deleted`` files to unlink
    (unlinking a large file frees its blocks there and then, which takes a while)."""
    doomed: list[Path] = []
    for segment in old:
        doomed += segment.mark_deleted()  # open FileSlices keep reading: their FileIO stays open
    cleaned.rename_suffix(SWAP_SUFFIX, "")
    return doomed


def complete_interrupted_swaps(directory: Path) -> set[int]:
    """Finish every committed swap in ``directory`` and delete uncommitted swap files.

    Returns the base offsets of the segments put in place; their indexes were dropped and
    the caller must rebuild them (``LogSegment.recover``). Run before segments are opened,
    after ``*.cleaned`` files are gone.
    """
    swapped: set[int] = set()
    for swap_log in sorted(directory.glob(f"*.log{SWAP_SUFFIX}")):
        base = parse_segment_name(swap_log.name)
        if base is None:
            continue
        end = _next_offset_in(swap_log, base)
        for path in list(directory.glob("*.log")):
            other = parse_segment_name(path.name)
            if other is not None and base < other < end:
                remove_segment_files(directory, other, "")
        for suffix in ("", SWAP_SUFFIX):
            for kind in (".index", ".timeindex"):
                (directory / f"{segment_name(base)}{kind}{suffix}").unlink(missing_ok=True)
        # The aborted-transaction index cannot be rebuilt from this segment alone (an entry
        # names data in earlier segments): the cleaned one is kept. Without a ``.swap`` it
        # was renamed already, or the group had no aborted transaction (no file at all).
        txn_swap = directory / f"{segment_name(base)}.txnindex{SWAP_SUFFIX}"
        if txn_swap.exists():
            os.replace(txn_swap, directory / f"{segment_name(base)}.txnindex")
        os.replace(swap_log, directory / f"{segment_name(base)}.log")
        swapped.add(base)
        logger.warning("%s: finished an interrupted compaction swap at offset %d", directory.name, base)
    for path in list(directory.glob(f"*{SWAP_SUFFIX}")):
        path.unlink(missing_ok=True)  # an index .swap without its .log.swap: never committed
    if swapped:
        fsync_dir(directory)
    return swapped


def _next_offset_in(path: Path, base: int) -> int:
    """The offset after the last whole batch of a segment file (``base`` if none)."""
    next_offset = base
    with open(path, "rb", buffering=0) as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        pos = 0
        while pos + BATCH_HEADER_SIZE <= size:
            try:
                header = read_header(os.pread(fd, BATCH_HEADER_SIZE, pos))
            except InvalidRecordError:
                break
            if header.size < BATCH_HEADER_SIZE or pos + header.size > size:
                break
            next_offset = header.next_offset
            pos += header.size
    return next_offset


def remove_segment_files(directory: Path, base: int, suffix: str) -> None:
    for kind in _SEGMENT_FILES:
        (directory / f"{segment_name(base)}{kind}{suffix}").unlink(missing_ok=True)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
