"""Errors the client library raises; each says what happened and what to do next."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from ..net.client import BrokerUnreachableError, ConnectionClosedError, UnsupportedByBrokerError

__all__ = [
    "BrokerUnreachableError",
    "ConnectionClosedError",
    "KafkaError",
    "UnknownTopicError",
    "UnsupportedByBrokerError",
]


class KafkaError(Exception):
    """A broker answered with a Kafka error code."""

    def __init__(self, code: ErrorCode | int, message: str | None = None) -> None:
        self.code = code if isinstance(code, ErrorCode) else ErrorCode(int(code))
        self.retriable = bool(getattr(self.code, "retriable", False))
        super().__init__(message or f"{self.code.name.upper()} ({int(self.code.value)})")


class UnknownTopicError(KafkaError):
    def __init__(self, topic: str) -> None:
        super().__init__(ErrorCode.unknown_topic_or_partition,
                         f"topic {topic!r} does not exist; create it with `pulllog topic create {topic}`")
        self.topic = topic
