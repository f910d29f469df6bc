"""The broker's file-descriptor budget: RLIMIT_NOFILE, split between segment files and the rest.

At start the broker raises its soft RLIMIT_NOFILE to the hard limit (as a JVM does with
``-XX:+MaxFDLimit``, on by default) and gives at most half of it to open segment files
(``log.max.open.files``, the cap of :mod:`pulllog.log.handles`); the rest is for
connections, the listening socket, metadata files written in passing and
the interpreter's own. The logs reopen whatever the cap closed, so this bounds descriptors
by the budget, not by the number of partitions.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

__all__ = ["FdBudget", "open_files_budget"]

_RESERVE = 32
"""Descriptors kept out of the segment files' half in any case (small limits, as in tests)."""
_DERIVED_MAX = 1 << 20
_DERIVED_MIN = 16


@dataclass(frozen=True, slots=True)
class FdBudget:
    soft: int  # RLIMIT_NOFILE after raising it
    hard: int
    raised_from: int | None  # the soft limit before, when it was raised
    max_open_files: int  # segment files held open at once

    def describe(self) -> str:
        raised = f" (raised from {self.raised_from})" if self.raised_from is not None else ""
        return (f"open files: RLIMIT_NOFILE {_show(self.soft)}{raised}, hard {_show(self.hard)}; "
                f"up to {self.max_open_files} segment files open at once (log.max.open.files)")


def _show(limit: int) -> str:
    return "unlimited" if limit == resource.RLIM_INFINITY else str(limit)


def open_files_budget(max_open_files: int) -> FdBudget:
    """Raise the soft RLIMIT_NOFILE to the hard limit and size the segment-file cache:
    ``max_open_files`` when given (> 0), else half the limit less a small reserve."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    raised_from = None
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            raised_from, soft = soft, hard
        except (ValueError, OSError):
            pass  # e.g. macOS refuses RLIM_INFINITY: keep the soft limit
    limit = _DERIVED_MAX if soft == resource.RLIM_INFINITY else soft
    if max_open_files <= 0:
        max_open_files = min(_DERIVED_MAX, max(_DERIVED_MIN, limit // 2 - _RESERVE))
    return FdBudget(soft, hard, raised_from, max_open_files)
