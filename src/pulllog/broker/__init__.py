"""The broker: request handling, the purgatory, topic and partition management.

One concurrency model: asyncio's ``TaskGroup``. Every task the broker starts (each
connection's, the purgatory drivers', housekeeping's) belongs to one task group, entered by
``async with Broker(...)`` and left when the block ends; leaving it stops accepting, cancels
long polls, lets each connection finish the request in hand (up to 5 s), joins every task,
then flushes each log and writes its clean-shutdown marker. No task outlives the broker and
none is left for nothing to await. Why asyncio's and not anyio's: pulllog's clients are a
library that runs inside users' asyncio applications, so broker and clients share the model
those users already know (edge-triggered ``task.cancel()``, ``asyncio.timeout``), with no
dependency and no level-triggered cancel scopes to surprise them. To embed a broker::

    async with Broker(data_dir=path, port=0) as broker:   # returns once it listens
        ...                                                # clients use broker.bootstrap_servers

or, to run one until :meth:`Broker.stop` (as ``pulllog serve`` and
:class:`pulllog.testing.BrokerThread` do), ``await broker.serve(ready=future)``: the future
gets the broker once it listens, or the error that kept it from listening.

``Broker`` and ``BrokerConfig`` are imported on first use, so that modules the broker itself
imports (the group coordinator uses the purgatory) can import from this package freely.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["Broker", "BrokerConfig"]

_EXPORTS = {"Broker": ".broker", "BrokerConfig": ".config"}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pulllog.broker' has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)
