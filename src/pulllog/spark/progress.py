"""The export's output directory: its layout, its progress file, and how a run commits.

Layout (``--partition-by topic``, the default; ``date`` replaces the two directory levels
with ``date=YYYY-MM-DD``, the UTC day of the record timestamp, and keeps ``topic`` and
``partition`` as columns in the files)::

    OUT/
      topic=orders/partition=0/part-0-00000000000000000000-00000000000000500000.parquet
      topic=orders/partition=0/part-0-00000000000000500000-00000000000000731204.parquet
      topic=orders/partition=1/...
      _pulllog_export.json        the progress file (below)
      _pulllog/lock               held (flock) by the run writing to OUT
      _pulllog/staging/RUN/...    files a run has written but not yet published

A data file holds the records of offsets [start, end) of one partition, and is named by that
range: ``part-{partition}-{start:020d}-{end:020d}.parquet``. Columns named by the directories
are not repeated inside the files (Spark's convention; pyarrow and pandas refuse a column that
is both). Names beginning with ``_`` are skipped by Spark, pyarrow and pandas, and do not end
in ``.parquet``, so a DuckDB glob ``OUT/**/*.parquet`` skips them too.

The progress file::

    {"format": 1, "topic": "orders", "partition_by": "topic",
     "value_schema": "id long, name string",          only with --value-format json (json_values)
     "committed": {"0": 731204, "1": 699873},        next offset to export, per partition
     "pending": null | {"run": RUN, "committed": {...}, "files": ["topic=orders/...", ...]},
     "last_run": {...summary...}}

It is replaced atomically (write a temporary file, fsync, rename, fsync the directory).

The rules that make a run exactly-once for any Parquet reader:

1. Published files (outside ``_pulllog``) cover exactly the committed offsets: for each
   partition, the union of their ranges is a prefix [first, committed) with no overlap.
2. A run plans ranges from the committed offsets and writes every file into its staging
   directory (``.staged``), named by its range, so a retried task overwrites its own file.
   Nothing a reader looks at changes while tasks run; a run killed here leaves only staging.
3. When every task has succeeded, the driver writes ``pending`` (the new committed offsets
   and the files to publish), then renames each staged file into place, in offset order per
   partition, then writes the new ``committed`` with ``pending`` null. A run killed while
   publishing leaves a prefix of its files published, in order, and ``pending`` saying how
   to finish.
4. Every run starts with recovery: finish a ``pending`` publish (roll forward), delete
   staging, and delete any published file reaching past ``committed`` (only an interrupted
   ``--full`` leaves those).

So at every moment each partition's published files are a gap-free, duplicate-free prefix of
its log, and after recovery they are exactly [first, committed).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["PROGRESS_FILE", "DataFile", "ExportDir", "ExportDirError", "data_file_name"]

PROGRESS_FILE = "_pulllog_export.json"
FORMAT = 1
_PRIVATE = "_pulllog"
STAGED_SUFFIX = ".staged"
_NAME = re.compile(r"part-(\d+)-(\d{20})-(\d{20})\.parquet")
LAYOUTS = ("topic", "date")


class ExportDirError(Exception):
    """The output directory cannot be used as asked; the message says why and what to do."""


def data_file_name(partition: int, start: int, end: int) -> str:
    return f"part-{partition}-{start:020d}-{end:020d}.parquet"


@dataclass(frozen=True, slots=True)
class DataFile:
    """A published data file, parsed from its path relative to OUT."""

    path: str
    partition: int
    start: int
    end: int


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomically(path: Path, doc: Mapping[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


class ExportDir:
    """OUT, locked for one run. ``open`` checks ownership and recovers; ``publish`` commits."""

    def __init__(self, root: Path, topic: str, partition_by: str, doc: dict[str, Any], lock_fd: int) -> None:
        self.root, self.topic, self.partition_by = root, topic, partition_by
        self._doc = doc
        self._lock_fd = lock_fd
        self.recovered: list[str] = []  # what recovery did, for the summary

    # ------------------------------------------------------------------ opening

    @classmethod
    def open(cls, root: str | Path, topic: str, partition_by: str = "topic", *, full: bool = False) -> ExportDir:
        root = Path(root)
        if partition_by not in LAYOUTS:
            raise ExportDirError(f"--partition-by {partition_by!r}: expected one of {', '.join(LAYOUTS)}")
        if root.exists() and not root.is_dir():
            raise ExportDirError(f"{root} exists and is not a directory")
        progress = root / PROGRESS_FILE
        if (root.exists() and not progress.exists()
                and any(not p.name.startswith((".", "_")) for p in root.iterdir())):
            raise ExportDirError(f"{root} is not empty and holds no pulllog export ({PROGRESS_FILE} is missing); "
                                 "choose a new or empty directory")
        (root / _PRIVATE).mkdir(parents=True, exist_ok=True)
        lock_fd = os.open(root / _PRIVATE / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(lock_fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise ExportDirError(f"another export is writing to {root}; wait for it to finish") from None
            raise
        try:
            doc = cls._read(progress)  # under the lock: no run is changing it now
            if doc is not None and doc.get("topic") != topic:
                raise ExportDirError(f"{root} holds the export of topic {doc.get('topic')!r}, not {topic!r}; "
                                     f"choose another directory (or --topic {doc.get('topic')})")
            if doc is not None and doc.get("partition_by") != partition_by and not full:
                raise ExportDirError(f"{root} is partitioned by {doc.get('partition_by')}, not {partition_by}; "
                                     f"use --partition-by {doc.get('partition_by')}, or --full to rewrite it")
        except BaseException:
            os.close(lock_fd)
            raise
        if doc is None:
            doc = {"format": FORMAT, "topic": topic, "partition_by": partition_by, "committed": {}, "pending": None}
        out = cls(root, topic, partition_by, doc, lock_fd)
        try:
            out._recover()
            if full:
                out._reset(partition_by)
        except BaseException:
            out.close()
            raise
        return out

    @staticmethod
    def _read(progress: Path) -> dict[str, Any] | None:
        try:
            text = progress.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ExportDirError(f"{progress} is damaged ({exc.msg}); use --full to start the export over") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ExportDirError(f"{progress} is not a pulllog export progress file of format {FORMAT}")
        return doc

    def close(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = -1

    def __enter__(self) -> ExportDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ state

    @property
    def committed(self) -> dict[int, int]:
        return {int(p): int(o) for p, o in self._doc["committed"].items()}

    @property
    def value_schema(self) -> str | None:
        """The schema values are parsed with (``--value-format json``), or None for raw values."""
        return self._doc.get("value_schema")

    @value_schema.setter
    def value_schema(self, schema: str | None) -> None:
        """Saved by the next ``publish``, with the first files written with it."""
        if schema is None:
            self._doc.pop("value_schema", None)
        else:
            self._doc["value_schema"] = schema

    @property
    def last_run(self) -> dict[str, Any] | None:
        return self._doc.get("last_run")

    def staging(self, run_id: str) -> Path:
        return self.root / _PRIVATE / "staging" / run_id

    def final_path(self, relative: str) -> Path:
        return self.root / relative

    def data_files(self) -> list[DataFile]:
        """Every published data file, in (partition, start) order."""
        out = []
        for path in self._data_paths():
            m = _NAME.fullmatch(path.name)
            if m:
                out.append(DataFile(str(path.relative_to(self.root)), int(m[1]), int(m[2]), int(m[3])))
        return sorted(out, key=lambda f: (f.partition, f.start, f.path))

    def _data_paths(self) -> Iterator[Path]:
        patterns = ("topic=*/partition=*/part-*.parquet", "date=*/part-*.parquet")
        for pattern in patterns:
            yield from self.root.glob(pattern)

    def _save(self) -> None:
        write_json_atomically(self.root / PROGRESS_FILE, self._doc)

    # ------------------------------------------------------------------ recovery

    def _recover(self) -> None:
        pending = self._doc.get("pending")
        if pending:
            self._publish_files(pending["run"], pending["files"])
            self._doc["committed"] = pending["committed"]
            self._doc["pending"] = None
            self._save()
            self.recovered.append(f"finished publishing run {pending['run']} ({len(pending['files'])} files)")
        staging = self.root / _PRIVATE / "staging"
        if staging.exists():
            runs = sorted(p.name for p in staging.iterdir())
            shutil.rmtree(staging)
            if runs:
                self.recovered.append(f"discarded the unfinished work of {len(runs)} interrupted run(s)")
        committed = self.committed
        orphans = [f for f in self.data_files() if f.end > committed.get(f.partition, -1)]
        for f in orphans:
            (self.root / f.path).unlink()
        if orphans:
            self._prune_empty_dirs()
            self.recovered.append(f"removed {len(orphans)} file(s) past the committed offsets")

    def _reset(self, partition_by: str) -> None:
        """``--full``: forget the progress, then recovery's rule 4 removes every data file."""
        self._doc.update({"committed": {}, "pending": None, "partition_by": partition_by})
        self._doc.pop("last_run", None)
        self._doc.pop("value_schema", None)
        self.partition_by = partition_by
        self._save()
        self._recover()

    def _prune_empty_dirs(self) -> None:
        for d in sorted((p for p in self.root.glob("*=*/**") if p.is_dir()), key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):
                d.rmdir()
        for d in self.root.glob("*=*"):
            with contextlib.suppress(OSError):
                d.rmdir()

    # ------------------------------------------------------------------ commit

    def publish(self, run_id: str, files: Iterable[str], committed: Mapping[int, int],
                last_run: Mapping[str, Any] | None = None) -> None:
        """Rule 3: record the intent, move the staged files into place, commit."""
        ordered = sorted(files, key=_offset_order)
        missing = [rel for rel in ordered if not (self.staging(run_id) / (rel + STAGED_SUFFIX)).exists()]
        if missing:  # checked before the intent is written, so nothing is left half-committed
            raise ExportDirError(f"the tasks wrote {missing[0]} where this machine cannot see it; on a cluster "
                                 f"{self.root} must be a directory every executor shares (a shared mount)")
        new_committed = {str(p): int(o) for p, o in sorted(committed.items())}
        self._doc["pending"] = {"run": run_id, "committed": new_committed, "files": ordered}
        self._save()
        self._publish_files(run_id, ordered)
        self._doc["committed"] = new_committed
        self._doc["pending"] = None
        if last_run is not None:
            self._doc["last_run"] = dict(last_run)
        self._save()
        shutil.rmtree(self.staging(run_id), ignore_errors=True)
        with contextlib.suppress(OSError):
            self.staging(run_id).parent.rmdir()  # only if no other run's work is in it

    def _publish_files(self, run_id: str, files: Iterable[str]) -> None:
        staging = self.staging(run_id)
        touched: set[Path] = set()
        for rel in files:
            src = staging / (rel + STAGED_SUFFIX)
            dst = self.root / rel
            if src.exists():
                dst.parent.mkdir(parents=True, exist_ok=True)
                os.replace(src, dst)
                touched.add(dst.parent)
            elif not dst.exists():
                raise ExportDirError(f"{self.root}: run {run_id} was committing {rel} but the file is gone; "
                                     "use --full to start the export over")
        for d in touched:
            _fsync_dir(d)


def _offset_order(rel: str) -> tuple[int, int, str]:
    m = _NAME.fullmatch(Path(rel).name)
    return (int(m[1]), int(m[2]), rel) if m else (-1, -1, rel)
