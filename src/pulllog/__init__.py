"""pulllog: a pull-based log broker that speaks the Kafka wire protocol, and its asyncio clients.

    from pulllog import Broker, Producer, Consumer, Admin, TopicPartition

Names are imported on first use, so ``import pulllog`` stays cheap (the CLI starts fast).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "Broker": "pulllog.broker.broker",
    "BrokerConfig": "pulllog.broker.config",
    "Producer": "pulllog.client.producer",
    "Consumer": "pulllog.client.consumer",
    "Admin": "pulllog.client.admin",
    "TopicPartition": "pulllog.client.types",
    "ConsumerRecord": "pulllog.client.types",
    "RecordMetadata": "pulllog.client.types",
    "KafkaError": "pulllog.client.errors",
    "CommitFailedError": "pulllog.client.membership",
    "OffsetAndMetadata": "pulllog.client.membership",
    "ConsumerGroupMetadata": "pulllog.client.types",
    "ProducerFencedError": "pulllog.client.transactions",
    "AbortableTransactionError": "pulllog.client.transactions",
    "FatalTransactionError": "pulllog.client.transactions",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pulllog' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(__all__)
