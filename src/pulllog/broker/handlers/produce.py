"""Produce (0): validate every batch of a partition, then append; acks 0, 1 and -1.

Each partition stands alone, as in Kafka: a bad batch for one partition fails that
partition with its error code and leaves the others of the request unharmed. Nothing of a
partition's records is appended unless all of its batches are valid. With one replica,
acks=-1 is satisfied as soon as the append returns (the high watermark is the log end
offset); with replication it will wait in the purgatory.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ...log import InvalidRecordError, RecordErrors
from ...net.build import build, response_class
from ..topics import InvalidTopicError, UnknownTopicError, validate_topic_name
from . import RequestContext, handler
from .errors import error_code_for

if TYPE_CHECKING:
    from ..broker import Broker

log = logging.getLogger(__name__)


def _partition_error(index: int, code: ErrorCode, message: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"index": index, "error_code": code, "base_offset": -1, "log_append_time": None,
            "log_start_offset": -1, "record_errors": extra.get("record_errors", []), "error_message": message}


@handler(0, "Produce", 3, 9)
async def handle(broker: "Broker", ctx: RequestContext) -> Any:
    body = ctx.body
    acks = body.acks
    responses = []
    if acks not in (0, 1, -1):
        for topic in body.topic_data:
            responses.append({"name": topic.name, "partition_responses": [
                _partition_error(p.index, ErrorCode.invalid_required_acks) for p in topic.partition_data]})
        return build(response_class("produce", ctx.version), {"responses": responses, "throttle_time": 0})
    for topic_data in body.topic_data:
        results = [append_partition(broker, topic_data.name, p.index, p.records) for p in topic_data.partition_data]
        responses.append({"name": topic_data.name, "partition_responses": results})
    if acks == 0:
        return None
    return build(response_class("produce", ctx.version), {"responses": responses, "throttle_time": 0})


def append_partition(broker: "Broker", topic_name: str, index: int, records: bytes | None) -> dict[str, Any]:
    try:
        validate_topic_name(topic_name)
        topic = broker.topics.topics.get(topic_name)
        if topic is None and broker.config.auto_create_topics:
            topic = broker.auto_create_topic(topic_name)
        if topic is None:
            raise UnknownTopicError(topic_name)
        partition = broker.topics.partition(topic_name, index)
    except (InvalidTopicError, UnknownTopicError) as exc:
        return _partition_error(index, error_code_for(exc), str(exc))
    if not records:
        return _partition_error(index, ErrorCode.corrupt_message, "the request carries no records for this partition")
    partition_log = partition.log
    try:
        batches = partition_log.validate(records)
        if any(header.is_control for _pos, header in batches):
            # Only the broker writes transaction markers (Kafka: INVALID_RECORD).
            return _partition_error(index, ErrorCode.invalid_record, "clients may not produce control batches")
        info = partition_log.append(records, validated=batches)
    except RecordErrors as exc:
        errors = [{"batch_index": rec, "batch_index_error_message": why} for _b, rec, why in exc.errors]
        return _partition_error(index, ErrorCode.invalid_record, str(exc), record_errors=errors)
    except InvalidRecordError as exc:
        log.info("produce to %s-%d rejected: %s", topic_name, index, exc)
        return _partition_error(index, error_code_for(exc), str(exc))
    except OSError as exc:
        log.error("append to %s-%d failed: %s", topic_name, index, exc)
        return _partition_error(index, ErrorCode.kafka_storage_error, f"storage error: {exc.strerror}")
    broker.on_append(topic_name, index)
    return {
        "index": index,
        "error_code": 0,
        "base_offset": info.first_offset,
        "log_append_time": info.log_append_time if info.log_append_time >= 0 else None,
        "log_start_offset": info.log_start_offset,
        "record_errors": [],
        "error_message": None,
    }
