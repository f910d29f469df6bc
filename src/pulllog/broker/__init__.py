"""The broker: request handling, the purgatory, topic and partition management.

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
