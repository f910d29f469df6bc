"""Records of the compacted topic ``__transaction_state``, in Kafka's own formats.

One record per transactional id and state change; compaction keeps the latest. Keys and values
are what Kafka's transaction coordinator writes (TransactionLogKey / TransactionLogValue), each
prefixed by its int16 version, so Kafka's tools would read the topic::

    key   (version 0): transactional_id string (int16 length)
    value (version 0): producer_id int64, producer_epoch int16, transaction_timeout_ms int32,
                       state int8 (TxnState ids), partitions nullable array of
                       (topic string, partition ids array of int32),
                       last_update_timestamp_ms int64, start_timestamp_ms int64
    value (version 1): the same fields in the flexible encoding (unsigned-varint lengths + 1,
                       0 for a null array; an empty tagged-field section after each partition
                       entry), then tagged fields: 0 previous_producer_id int64 (default -1),
                       1 next_producer_id int64 (default -1), 2 client_transaction_version
                       int16 (default 0); a tag equal to its default is not written.

pulllog writes version 1, as Kafka 4 does once transaction.version 2 is finalized, and reads
both. An Empty transaction stores a null partition array. A null value is a tombstone: the
transactional id expired. Which partition holds an id: ``pulllog.net.coordinator_keys.partition_for``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = ["TRANSACTION_STATE_TOPIC", "TransactionLogValue", "decode_key", "decode_value", "encode_key",
           "encode_value"]

TRANSACTION_STATE_TOPIC = "__transaction_state"

_H, _I, _Q = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")
_VALUE_V1 = struct.Struct(">qhib")  # producer id, epoch, timeout, state
_TIMESTAMPS = struct.Struct(">qq")


@dataclass(frozen=True, slots=True)
class TransactionLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state_id: int
    partitions: tuple[tuple[str, int], ...]
    last_update_timestamp: int
    start_timestamp: int
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_key(transactional_id: str) -> bytes:
    data = transactional_id.encode()
    return _H.pack(0) + _H.pack(len(data)) + data


def _grouped(partitions: tuple[tuple[str, int], ...]) -> dict[str, list[int]]:
    topics: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        topics.setdefault(topic, []).append(partition)
    return topics


def encode_value(v: TransactionLogValue, version: int = 1) -> bytes:
    out = bytearray(_H.pack(version))
    out += _VALUE_V1.pack(v.producer_id, v.producer_epoch, v.timeout_ms, v.state_id)
    empty = v.state_id == 0  # Kafka stores an Empty transaction's partitions as null
    topics = _grouped(v.partitions)
    if version == 0:
        if empty:
            out += _I.pack(-1)
        else:
            out += _I.pack(len(topics))
            for topic, ids in topics.items():
                name = topic.encode()
                out += _H.pack(len(name)) + name + _I.pack(len(ids))
                out += b"".join(_I.pack(p) for p in ids)
        out += _TIMESTAMPS.pack(v.last_update_timestamp, v.start_timestamp)
        return bytes(out)
    if empty:
        out += _uvarint(0)
    else:
        out += _uvarint(len(topics) + 1)
        for topic, ids in topics.items():
            name = topic.encode()
            out += _uvarint(len(name) + 1) + name + _uvarint(len(ids) + 1)
            out += b"".join(_I.pack(p) for p in ids)
            out += _uvarint(0)  # the entry's tagged fields: none
    out += _TIMESTAMPS.pack(v.last_update_timestamp, v.start_timestamp)
    tags = []
    if v.previous_producer_id != -1:
        tags.append((0, _Q.pack(v.previous_producer_id)))
    if v.next_producer_id != -1:
        tags.append((1, _Q.pack(v.next_producer_id)))
    if v.client_transaction_version != 0:
        tags.append((2, _H.pack(v.client_transaction_version)))
    out += _uvarint(len(tags))
    for tag, data in tags:
        out += _uvarint(tag) + _uvarint(len(data)) + data
    return bytes(out)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def fixed(self, fmt: struct.Struct) -> tuple[int, ...]:
        values = fmt.unpack_from(self.data, self.pos)
        self.pos += fmt.size
        return values  # type: ignore[no-any-return]

    def uvarint(self) -> int:
        shift = n = 0
        while True:
            b = self.data[self.pos]
            self.pos += 1
            n |= (b & 0x7F) << shift
            if b < 0x80:
                return n
            shift += 7
            if shift > 28:
                raise ValueError("unsigned varint longer than 5 bytes")

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError("truncated __transaction_state record")
        v = self.data[self.pos:self.pos + n]
        self.pos += n
        return bytes(v)

    def skip_tags(self) -> dict[int, bytes]:
        tags = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            tags[tag] = self.raw(self.uvarint())
        return tags


def decode_key(data: bytes) -> str:
    """The transactional id; ValueError for a key of an unknown version."""
    r = _Reader(data)
    (version,) = r.fixed(_H)
    if version != 0:
        raise ValueError(f"unknown __transaction_state key version {version}")
    (n,) = r.fixed(_H)
    return r.raw(n).decode()


def decode_value(data: bytes) -> TransactionLogValue:
    r = _Reader(data)
    (version,) = r.fixed(_H)
    if version not in (0, 1):
        raise ValueError(f"unknown __transaction_state value version {version}")
    producer_id, epoch, timeout, state_id = r.fixed(_VALUE_V1)
    partitions: list[tuple[str, int]] = []
    if version == 0:
        (count,) = r.fixed(_I)
        for _ in range(max(count, 0)):
            (n,) = r.fixed(_H)
            topic = r.raw(n).decode()
            (ids,) = r.fixed(_I)
            partitions += [(topic, r.fixed(_I)[0]) for _ in range(ids)]
    else:
        count = r.uvarint() - 1
        for _ in range(max(count, 0)):
            topic = r.raw(r.uvarint() - 1).decode()
            ids = r.uvarint() - 1
            partitions += [(topic, r.fixed(_I)[0]) for _ in range(max(ids, 0))]
            r.skip_tags()
    last_update, start = r.fixed(_TIMESTAMPS)
    previous = next_id = -1
    client_version = 0
    if version >= 1:
        tags = r.skip_tags()
        if 0 in tags:
            (previous,) = _Q.unpack(tags[0])
        if 1 in tags:
            (next_id,) = _Q.unpack(tags[1])
        if 2 in tags:
            (client_version,) = _H.unpack(tags[2])
    return TransactionLogValue(producer_id, epoch, timeout, state_id, tuple(partitions), last_update, start,
                               previous, next_id, client_version)
