"""The consumer protocol inside JoinGroup / SyncGroup: subscriptions and assignments.

Both are ``int16 version`` followed by the kio-generated body of that version
(ConsumerProtocolSubscription v0-v3, ConsumerProtocolAssignment v0-v3, from Kafka's
schemas). A member may send a newer version than we know: Kafka's rule is to read it with
the newest known schema and ignore what follows, which is what ``decode_*`` do.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass, field
from typing import Any

from kio.schema.consumer_protocol_assignment.v3 import ConsumerProtocolAssignment as _AssignmentV3
from kio.schema.consumer_protocol_subscription.v3 import ConsumerProtocolSubscription as _SubscriptionV3
from kio.serial import entity_reader, entity_writer

__all__ = ["Assignment", "Subscription", "decode_assignment", "decode_subscription",
           "encode_assignment", "encode_subscription"]

_VERSION = struct.Struct(">h")
_MAX_KNOWN = 3


@dataclass(frozen=True)
class Subscription:
    topics: tuple[str, ...]
    owned_partitions: tuple[tuple[str, int], ...] = ()
    generation_id: int = -1
    user_data: bytes | None = None
    rack_id: str | None = None


@dataclass(frozen=True)
class Assignment:
    partitions: tuple[tuple[str, int], ...] = ()
    user_data: bytes | None = None
    by_topic: dict[str, list[int]] = field(default_factory=dict, compare=False, repr=False)


def _module(kind: str, version: int) -> Any:
    import importlib

    return importlib.import_module(f"kio.schema.consumer_protocol_{kind}.v{version}.data")


def _group_by_topic(partitions: tuple[tuple[str, int], ...]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for topic, partition in partitions:
        out.setdefault(topic, []).append(partition)
    return {t: sorted(ps) for t, ps in sorted(out.items())}


def encode_subscription(sub: Subscription, version: int = 3) -> bytes:
    mod = _module("subscription", version)
    kwargs: dict[str, Any] = {"topics": tuple(sorted(sub.topics)), "user_data": sub.user_data}
    if version >= 1:
        kwargs["owned_partitions"] = tuple(mod.TopicPartition(topic=t, partitions=tuple(ps))
                                           for t, ps in _group_by_topic(sub.owned_partitions).items())
    if version >= 2:
        kwargs["generation_id"] = sub.generation_id
    if version >= 3:
        kwargs["rack_id"] = sub.rack_id
    entity = mod.ConsumerProtocolSubscription(**kwargs)
    buf = io.BytesIO()
    buf.write(_VERSION.pack(version))
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def decode_subscription(data: bytes) -> Subscription:
    """Raises ValueError for bytes that are not a consumer subscription."""
    try:
        (version,) = _VERSION.unpack_from(data)
        mod = _module("subscription", min(max(version, 0), _MAX_KNOWN))
        entity, _ = entity_reader(mod.ConsumerProtocolSubscription)(bytes(data), 2)
    except Exception as exc:
        raise ValueError(f"not a consumer protocol subscription: {exc}") from None
    owned = tuple((tp.topic, int(p)) for tp in getattr(entity, "owned_partitions", ()) for p in tp.partitions)
    return Subscription(tuple(entity.topics), owned, int(getattr(entity, "generation_id", -1)),
                        entity.user_data, getattr(entity, "rack_id", None))


def encode_assignment(assignment: Assignment, version: int = 0) -> bytes:
    mod = _module("assignment", version)
    entity = mod.ConsumerProtocolAssignment(
        assigned_partitions=tuple(mod.TopicPartition(topic=t, partitions=tuple(ps))
                                  for t, ps in _group_by_topic(assignment.partitions).items()),
        user_data=assignment.user_data)
    buf = io.BytesIO()
    buf.write(_VERSION.pack(version))
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def decode_assignment(data: bytes) -> Assignment:
    if not data:
        return Assignment()
    try:
        (version,) = _VERSION.unpack_from(data)
        mod = _module("assignment", min(max(version, 0), _MAX_KNOWN))
        entity, _ = entity_reader(mod.ConsumerProtocolAssignment)(bytes(data), 2)
    except Exception as exc:
        raise ValueError(f"not a consumer protocol assignment: {exc}") from None
    parts = tuple((tp.topic, int(p)) for tp in entity.assigned_partitions for p in tp.partitions)
    return Assignment(parts, entity.user_data, _group_by_topic(parts))


_ = _AssignmentV3, _SubscriptionV3  # the newest versions we know (imported to fail early if kio lacks them)
