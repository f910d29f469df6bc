"""ControlledShutdown (api key 7), v1-v3: the message kio does not have.

A broker of Kafka's ZooKeeper mode sends it to the controller when it stops cleanly; the
controller moves the leadership of the broker's partitions to other in-sync replicas and
answers with those it could not move yet. Kafka 4 (KRaft) dropped the API, and kio, generated
from Kafka 4's message definitions, has no schema for it. These classes are written in kio's
form (frozen dataclasses with the same class variables and field metadata), so kio's readers
and writers, :func:`pulllog.net.build.build` and the request decoder treat them like any other
message; :func:`own_schema` is where net/ looks them up before asking kio's index. Versions
(Kafka's ``ControlledShutdownRequest.json`` / ``ControlledShutdownResponse.json``)::

    request  v1: broker_id int32                        (request header v1)
             v2: v1 + broker_epoch int64 (-1: unknown)  (request header v1)
             v3: v2, flexible                           (request header v2)
    response v1, v2: error_code int16, remaining_partitions [topic_name string, partition_index int32]
             v3: the same, flexible                     (response header v1)

v0 (request header v0, no client id) is not served: no broker since Kafka 0.9 sends it.

(No ``from __future__ import annotations`` here: kio reads the field types at run time.)
"""

from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.schema.types import BrokerId, TopicName
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32, i64

__all__ = ["API_KEY", "MAX_VERSION", "MIN_VERSION", "own_schema"]

API_KEY = 7
MIN_VERSION = 1
MAX_VERSION = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlledShutdownRequestV1:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[RequestHeaderV1]] = RequestHeaderV1
    broker_id: BrokerId = field(metadata={"kafka_type": "int32"})
    """The id of the broker for which controlled shutdown has been requested."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlledShutdownRequestV2:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(2)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[RequestHeaderV1]] = RequestHeaderV1
    broker_id: BrokerId = field(metadata={"kafka_type": "int32"})
    broker_epoch: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))
    """The broker's epoch (its registration's creation zxid), -1 if unknown."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlledShutdownRequestV3:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(3)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[RequestHeaderV2]] = RequestHeaderV2
    broker_id: BrokerId = field(metadata={"kafka_type": "int32"})
    broker_epoch: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))


@dataclass(frozen=True, slots=True, kw_only=True)
class RemainingPartitionV1:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[ResponseHeaderV0]] = ResponseHeaderV0
    topic_name: TopicName = field(metadata={"kafka_type": "string"})
    partition_index: i32 = field(metadata={"kafka_type": "int32"})


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlledShutdownResponseV1:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[ResponseHeaderV0]] = ResponseHeaderV0
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    remaining_partitions: tuple[RemainingPartitionV1, ...]
    """The partitions the broker still leads."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RemainingPartitionV2:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(2)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[ResponseHeaderV0]] = ResponseHeaderV0
    topic_name: TopicName = field(metadata={"kafka_type": "string"})
    partition_index: i32 = field(metadata={"kafka_type": "int32"})


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlledShutdownResponseV2:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(2)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[ResponseHeaderV0]] = ResponseHeaderV0
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    remaining_partitions: tuple[RemainingPartitionV2, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RemainingPartitionV3:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(3)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[ResponseHeaderV1]] = ResponseHeaderV1
    topic_name: TopicName = field(metadata={"kafka_type": "string"})
    partition_index: i32 = field(metadata={"kafka_type": "int32"})


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlledShutdownResponseV3:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(3)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[ResponseHeaderV1]] = ResponseHeaderV1
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    remaining_partitions: tuple[RemainingPartitionV3, ...]


_SCHEMAS: dict[tuple[int, EntityType], type] = {
    (1, EntityType.request): ControlledShutdownRequestV1,
    (2, EntityType.request): ControlledShutdownRequestV2,
    (3, EntityType.request): ControlledShutdownRequestV3,
    (1, EntityType.response): ControlledShutdownResponseV1,
    (2, EntityType.response): ControlledShutdownResponseV2,
    (3, EntityType.response): ControlledShutdownResponseV3,
}


def own_schema(api_key: int, version: int, entity_type: EntityType) -> type | None:
    """pulllog's own class for a message kio lacks (ControlledShutdown v1-v3), else None."""
    if api_key != API_KEY:
        return None
    return _SCHEMAS.get((version, entity_type))
