"""Errors the client library raises; each says what happened and what to do next."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from .connection import BrokerUnreachableError, ConnectionClosedError, UnsupportedByBrokerError

__all__ = [
    "BrokerUnreachableError",
    "ConnectionClosedError",
    "InvalidConfigError",
    "InvalidPartitionsError",
    "InvalidReplicationFactorError",
    "InvalidTopicError",
    "KafkaError",
    "TopicAlreadyExistsError",
    "UnknownTopicError",
    "UnsupportedByBrokerError",
    "error_for",
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


class TopicAlreadyExistsError(KafkaError):
    """TOPIC_ALREADY_EXISTS (36)."""


class InvalidPartitionsError(KafkaError):
    """INVALID_PARTITIONS (37): a partition count below 1, or one that would shrink a topic."""


class InvalidReplicationFactorError(KafkaError):
    """INVALID_REPLICATION_FACTOR (38): more replicas than brokers."""


class InvalidConfigError(KafkaError):
    """INVALID_CONFIG (40): an unknown config name or a value out of range."""


class InvalidTopicError(KafkaError):
    """INVALID_TOPIC_EXCEPTION (17): not a legal topic name."""


# error code -> the KafkaError subclass that takes (code, message); add new ones here
_BY_CODE: dict[ErrorCode, type[KafkaError]] = {
    ErrorCode.topic_already_exists: TopicAlreadyExistsError,
    ErrorCode.invalid_partitions: InvalidPartitionsError,
    ErrorCode.invalid_replication_factor: InvalidReplicationFactorError,
    ErrorCode.invalid_config: InvalidConfigError,
    ErrorCode.invalid_topic_exception: InvalidTopicError,
}


def error_for(code: ErrorCode | int, message: str | None = None) -> KafkaError:
    """The most specific KafkaError for ``code`` (KafkaError itself when there is none)."""
    code = code if isinstance(code, ErrorCode) else ErrorCode(int(code))
    return _BY_CODE.get(code, KafkaError)(code, message)
