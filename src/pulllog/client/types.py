"""Values the client library hands to applications."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ConsumerGroupMetadata", "ConsumerRecord", "RecordMetadata", "TopicPartition"]


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where a produced record landed (what ``await producer.send(...)`` returns)."""

    topic: str
    partition: int
    offset: int
    timestamp: int  # ms; the broker's time for LogAppendTime topics, else the record's


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int  # ms since the epoch
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """A group member's identity, what ``producer.send_offsets_to_transaction`` needs
    (``consumer.group_metadata()``): the group coordinator refuses the transaction's offsets
    from a member that is no longer in the group's current generation (a zombie)."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None
