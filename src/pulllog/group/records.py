"""Records of the compacted topic ``__consumer_offsets``, in Kafka's own formats.

Keys and values are the classic (int16-length string) encodings Kafka's group coordinator
writes, so Kafka tools reading the topic would recognise them::

    offset commit key   (version 1): group string, topic string, partition int32
    offset commit value (version 3): offset int64, leader_epoch int32, metadata string,
                                     commit_timestamp int64
    group metadata key  (version 2): group string
    group metadata value (version 3): protocol_type string, generation int32,
                                     protocol nullable string, leader nullable string,
                                     current_state_timestamp int64, members array of
                                     (member_id, group_instance_id?, client_id, client_host,
                                      rebalance_timeout int32, session_timeout int32,
                                      subscription bytes, assignment bytes)

A null value is a tombstone: compaction removes the key after ``delete.retention.ms``.
Which partition holds a group: ``pulllog.net.coordinator_keys.partition_for``, as Kafka.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = [
    "GroupMetadataValue",
    "MemberMetadata",
    "OffsetKey",
    "OffsetValue",
    "decode_key",
    "decode_group_value",
    "decode_offset_value",
    "encode_group_key",
    "encode_group_value",
    "encode_offset_key",
    "encode_offset_value",
]

_H, _I, _Q = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()

    def i16(self, v: int) -> "_Writer":
        self.out += _H.pack(v)
        return self

    def i32(self, v: int) -> "_Writer":
        self.out += _I.pack(v)
        return self

    def i64(self, v: int) -> "_Writer":
        self.out += _Q.pack(v)
        return self

    def string(self, v: str | None) -> "_Writer":
        if v is None:
            return self.i16(-1)
        data = v.encode()
        self.i16(len(data))
        self.out += data
        return self

    def bytes_(self, v: bytes | None) -> "_Writer":
        if v is None:
            return self.i32(-1)
        self.i32(len(v))
        self.out += v
        return self


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def _take(self, fmt: struct.Struct) -> int:
        (v,) = fmt.unpack_from(self.data, self.pos)
        self.pos += fmt.size
        return int(v)

    def i16(self) -> int:
        return self._take(_H)

    def i32(self) -> int:
        return self._take(_I)

    def i64(self) -> int:
        return self._take(_Q)

    def string(self) -> str | None:
        n = self.i16()
        if n < 0:
            return None
        v = self.data[self.pos : self.pos + n].decode()
        self.pos += n
        return v

    def bytes_(self) -> bytes | None:
        n = self.i32()
        if n < 0:
            return None
        v = self.data[self.pos : self.pos + n]
        self.pos += n
        return bytes(v)


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class OffsetValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    state_timestamp: int
    members: tuple[MemberMetadata, ...]


def encode_offset_key(group: str, topic: str, partition: int) -> bytes:
    return bytes(_Writer().i16(1).string(group).string(topic).i32(partition).out)


def encode_offset_value(v: OffsetValue) -> bytes:
    return bytes(_Writer().i16(3).i64(v.offset).i32(v.leader_epoch).string(v.metadata).i64(v.commit_timestamp).out)


def encode_group_key(group: str) -> bytes:
    return bytes(_Writer().i16(2).string(group).out)


def encode_group_value(v: GroupMetadataValue) -> bytes:
    w = _Writer().i16(3).string(v.protocol_type).i32(v.generation).string(v.protocol).string(v.leader)
    w.i64(v.state_timestamp).i32(len(v.members))
    for m in v.members:
        w.string(m.member_id).string(m.group_instance_id).string(m.client_id).string(m.client_host)
        w.i32(m.rebalance_timeout_ms).i32(m.session_timeout_ms).bytes_(m.subscription).bytes_(m.assignment)
    return bytes(w.out)


def decode_key(data: bytes) -> OffsetKey | str:
    """An OffsetKey, or the group id of a group metadata key."""
    r = _Reader(data)
    version = r.i16()
    if version in (0, 1):
        return OffsetKey(r.string() or "", r.string() or "", r.i32())
    if version == 2:
        return r.string() or ""
    raise ValueError(f"unknown __consumer_offsets key version {version}")


def decode_offset_value(data: bytes) -> OffsetValue:
    r = _Reader(data)
    version = r.i16()
    offset = r.i64()
    epoch = r.i32() if version >= 3 else -1
    metadata = r.string() or ""
    timestamp = r.i64()
    return OffsetValue(offset, epoch, metadata, timestamp)


def decode_group_value(data: bytes) -> GroupMetadataValue:
    r = _Reader(data)
    version = r.i16()
    protocol_type = r.string() or ""
    generation = r.i32()
    protocol = r.string()
    leader = r.string()
    state_ts = r.i64() if version >= 2 else -1
    members = []
    for _ in range(r.i32()):
        member_id = r.string() or ""
        instance = r.string() if version >= 3 else None
        client_id = r.string() or ""
        host = r.string() or ""
        rebalance = r.i32() if version >= 1 else 0
        session = r.i32()
        members.append(MemberMetadata(member_id, instance, client_id, host, rebalance, session,
                                      r.bytes_() or b"", r.bytes_() or b""))
    return GroupMetadataValue(protocol_type, generation, protocol, leader, state_ts, tuple(members))
