"""Map pulllog's exceptions to Kafka error codes, in one place."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from ...log import ConfigError, OffsetOutOfRangeError, RecordErrors, RecordTooLargeError
from ...log.producer_state import (
    InvalidProducerEpochError,
    InvalidProducerFieldsError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from ...records import CorruptRecordError, InvalidRecordError, UnsupportedMagicError
from ..topics import InvalidTopicError, TopicExistsError, UnknownTopicError

__all__ = ["error_code_for", "storage_problem"]


def error_code_for(exc: BaseException) -> ErrorCode:
    match exc:
        case UnknownTopicError():
            return ErrorCode.unknown_topic_or_partition
        case InvalidTopicError():
            return ErrorCode.invalid_topic_exception
        case TopicExistsError():
            return ErrorCode.topic_already_exists
        case OffsetOutOfRangeError():
            return ErrorCode.offset_out_of_range
        case RecordTooLargeError():
            return ErrorCode.message_too_large
        case UnsupportedMagicError():
            return ErrorCode.unsupported_for_message_format
        case OutOfOrderSequenceError():
            return ErrorCode.out_of_order_sequence_number
        case TransactionCoordinatorFencedError():
            return ErrorCode.transaction_coordinator_fenced
        case InvalidProducerEpochError():
            return ErrorCode.invalid_producer_epoch
        case InvalidTxnStateError():
            return ErrorCode.invalid_txn_state
        case InvalidProducerFieldsError():
            return ErrorCode.invalid_record
        case RecordErrors():
            return ErrorCode.invalid_record
        case CorruptRecordError():
            return ErrorCode.corrupt_message
        case InvalidRecordError():
            return ErrorCode.corrupt_message
        case ConfigError():
            return ErrorCode.invalid_config
        case _:
            return ErrorCode.unknown_server_error


def storage_problem(exc: OSError) -> str:
    """An OSError in one line for an error message: the cause and the path."""
    return (exc.strerror or str(exc)) + (f" ({exc.filename})" if exc.filename else "")
