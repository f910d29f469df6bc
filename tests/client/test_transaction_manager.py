"""The transactional producer's state table and error rules, with no broker
(``pulllog.client.transactions``); tests/reference/test_transactional_clients.py runs them against
real brokers."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from pulllog.client.errors import KafkaError
from pulllog.client.transactions import (
    AbortableTransactionError,
    FatalTransactionError,
    Outcome,
    ProducerFencedError,
    TransactionAbortedError,
    TransactionManager,
    TransactionState,
    TransactionStateError,
    outcome,
    retry_backoff_s,
)

S = TransactionState


def ready() -> TransactionManager:
    txn = TransactionManager("tx")
    txn.transition(S.INITIALIZING)
    txn.set_producer_id_and_epoch(7, 0)
    txn.transition(S.READY)
    return txn


class _Batch:
    topic, partition, count = "t", 0, 1

    def __init__(self, sealed: bool) -> None:
        self.wire = b"sealed" if sealed else None

    def restamp(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
        pass


def test_a_transaction_goes_ready_in_transaction_committing_ready() -> None:
    txn = ready()
    txn.begin()
    txn.check_send("t", 0)
    assert txn.partitions_to_add() == [("t", 0)] and not txn.may_produce_to(("t", 0))
    txn.partitions_added([("t", 0)])
    assert txn.may_produce_to(("t", 0)) and txn.transaction_started
    txn.start_commit()
    assert txn.state is S.COMMITTING_TRANSACTION
    with pytest.raises(TransactionStateError):
        txn.check_send("t", 0)  # nothing more goes into a transaction being committed
    txn.completed()
    assert txn.state is S.READY and not txn.in_transaction and not txn.transaction_started
    with pytest.raises(TransactionStateError):
        txn.check_send("t", 0)


def test_a_partition_new_to_the_transaction_is_starting_until_a_batch_of_it_is_acknowledged() -> None:
    txn = ready()
    txn.begin()
    txn.check_send("t", 0)
    txn.check_send("t", 0)
    assert txn.starting_partitions == {("t", 0)}  # send() yields after every record
    txn.partitions_added([("t", 0)])
    assert txn.starting_partitions == {("t", 0)}  # added, but its first batch not answered yet
    txn.check_send("t", 1)  # another partition joins the transaction later
    txn.batch_acknowledged(("t", 0))
    assert txn.starting_partitions == {("t", 1)}
    txn.partitions_added([("t", 1)])
    txn.batch_acknowledged(("t", 1))
    assert not txn.starting_partitions  # both pipelines run: send() yields once per batch again
    txn.check_send("t", 0)
    assert not txn.starting_partitions  # in the transaction already


def test_send_may_skip_the_check_only_for_the_running_partition_it_passed_last() -> None:
    txn = ready()
    txn.begin()
    txn.check_send("t", 0)
    assert txn.fast_topic is None  # starting: send() yields every few records
    txn.partitions_added([("t", 0)])
    txn.batch_acknowledged(("t", 0))
    assert (txn.fast_topic, txn.fast_partition) == ("t", 0)
    txn.check_send("t", 1)  # a new partition starts: every send() is checked again
    assert txn.fast_topic is None
    txn.partitions_added([("t", 1)])
    txn.batch_acknowledged(("t", 1))
    assert (txn.fast_topic, txn.fast_partition) == ("t", 1)
    txn.fail(Outcome.ABORTABLE, KafkaError(ErrorCode.invalid_record))
    assert txn.fast_topic is None  # the next send() must raise the error
    txn.start_abort()
    txn.completed()
    txn.begin()
    assert txn.fast_topic is None  # a new transaction adds its partitions again


def test_a_partitions_first_batch_of_the_epoch_goes_alone_and_later_transactions_pipeline() -> None:
    txn = ready()
    txn.begin()
    txn.check_send("t", 0)
    txn.partitions_added([("t", 0)])
    assert txn.sends_alone(("t", 0))  # the leader may have no state for us: any sequence goes
    txn.batch_acknowledged(("t", 0))
    assert not txn.sends_alone(("t", 0))
    txn.start_commit()
    txn.completed()
    txn.begin()
    txn.check_send("t", 0)
    txn.partitions_added([("t", 0)])
    assert ("t", 0) in txn.starting_partitions  # send() still yields often while it restarts,
    assert not txn.sends_alone(("t", 0))  # but the leader holds our sequence: no batch waits
    assert txn.sends_alone(("t", 1))
    txn.start_abort()
    txn.transition(S.INITIALIZING)  # an abort that needs a new epoch (KIP-360)
    txn.set_producer_id_and_epoch(7, 1)
    assert txn.sends_alone(("t", 0))  # sequence 0 of a new epoch: alone again


def test_an_abort_forgets_the_starting_partitions() -> None:
    txn = ready()
    txn.begin()
    txn.check_send("t", 0)
    txn.start_abort()
    txn.completed()
    assert not txn.starting_partitions
    txn.begin()
    txn.check_send("t", 0)  # the next transaction adds it again
    assert txn.starting_partitions == {("t", 0)} and txn.to_add == {("t", 0)}


@pytest.mark.parametrize("call", ["begin twice", "send outside", "commit outside", "abort outside", "uninitialized"])
def test_calls_out_of_order_raise_a_state_error_that_says_what_to_do(call: str) -> None:
    txn = ready()
    with pytest.raises(TransactionStateError) as raised:
        if call == "begin twice":
            txn.begin()
            txn.begin()
        elif call == "send outside":
            txn.check_send("t", 0)
        elif call == "commit outside":
            txn.start_commit()
        elif call == "abort outside":
            txn.start_abort()
        else:
            TransactionManager("tx").begin()
    assert "cannot" in str(raised.value) and ":" in str(raised.value)


def test_fenced_is_fatal_and_every_later_call_raises_it() -> None:
    txn = ready()
    txn.begin()
    txn.check_send("t", 0)  # passed once: a later send() to it must still see the state
    error = txn.fail(outcome("end_txn", ErrorCode.producer_fenced), KafkaError(ErrorCode.producer_fenced))
    assert isinstance(error, ProducerFencedError) and error.fatal
    assert txn.state is S.FATAL_ERROR
    for call in (txn.begin, txn.start_abort, lambda: txn.check_send("t", 0)):
        with pytest.raises(ProducerFencedError):
            call()


def test_an_abortable_error_allows_only_abort() -> None:
    txn = ready()
    txn.begin()
    txn.check_send("t", 0)
    error = txn.fail(outcome("txn_offset_commit", ErrorCode.illegal_generation), KafkaError(ErrorCode.illegal_generation))
    assert isinstance(error, AbortableTransactionError) and not error.fatal
    assert txn.state is S.ABORTABLE_ERROR
    with pytest.raises(AbortableTransactionError):
        txn.check_send("t", 0)
    with pytest.raises(TransactionStateError):
        txn.start_commit()
    txn.start_abort()
    assert txn.state is S.ABORTING_TRANSACTION


def test_a_sealed_batch_that_fails_needs_a_new_epoch_after_the_abort() -> None:
    txn = ready()
    txn.begin()
    txn.batch_failed(_Batch(sealed=True), error=KafkaError(ErrorCode.message_too_large))
    assert txn.state is S.ABORTABLE_ERROR and txn.epoch_bump_required
    lowest, _highest, data = txn.init_producer_id_request()
    assert lowest == 3 and (data["producer_id"], data["producer_epoch"]) == (7, 0)
    txn.set_producer_id_and_epoch(7, 1)
    assert not txn.epoch_bump_required


def test_a_sealed_batch_the_abort_drops_needs_a_new_epoch() -> None:
    """A batch waiting for its retry holds sequence numbers; the abort drops it unsent, so the
    broker never sees them and the next transaction's first batch of the partition would be
    refused as out of order (OUT_OF_ORDER_SEQUENCE_NUMBER, seen against Kafka) without a new
    epoch. One never sealed took no sequence numbers: no new epoch for it."""
    txn = ready()
    txn.begin()
    txn.start_abort()
    txn.batch_failed(_Batch(sealed=False), error=TransactionAbortedError("aborted before it was sent"))
    assert not txn.epoch_bump_required
    txn.batch_failed(_Batch(sealed=True), error=TransactionAbortedError("aborted before it was sent"))
    assert txn.state is S.ABORTING_TRANSACTION and txn.epoch_bump_required


def test_a_batch_failing_while_aborting_changes_nothing() -> None:
    txn = ready()
    txn.begin()
    txn.start_abort()
    txn.batch_failed(_Batch(sealed=False), error=KafkaError(ErrorCode.not_leader_or_follower))
    assert txn.state is S.ABORTING_TRANSACTION


def test_a_fenced_produce_is_fatal_but_an_old_epoch_on_a_partition_is_abortable() -> None:
    txn = ready()
    txn.begin()
    txn.batch_failed(_Batch(sealed=True), error=KafkaError(ErrorCode.invalid_producer_epoch))
    assert txn.state is S.ABORTABLE_ERROR  # KIP-588: the coordinator aborted on its timeout
    txn.batch_failed(_Batch(sealed=True), error=KafkaError(ErrorCode.producer_fenced))
    assert txn.state is S.FATAL_ERROR and isinstance(txn.last_error, FatalTransactionError)


@pytest.mark.parametrize(("api", "code", "expected"), [
    ("init_producer_id", ErrorCode.concurrent_transactions, Outcome.RETRY),
    ("add_partitions_to_txn", ErrorCode.concurrent_transactions, Outcome.RETRY),
    ("end_txn", ErrorCode.coordinator_load_in_progress, Outcome.RETRY),
    ("end_txn", ErrorCode.not_coordinator, Outcome.REDISCOVER),
    ("txn_offset_commit", ErrorCode.request_timed_out, Outcome.REDISCOVER),
    ("end_txn", ErrorCode.invalid_producer_epoch, Outcome.FENCED),
    ("init_producer_id", ErrorCode.producer_fenced, Outcome.FENCED),
    ("find_coordinator", ErrorCode.transactional_id_authorization_failed, Outcome.FATAL),
    ("end_txn", ErrorCode.invalid_txn_state, Outcome.FATAL),
    ("add_offsets_to_txn", ErrorCode.unsupported_version, Outcome.FATAL),
    ("end_txn", ErrorCode.unknown_producer_id, Outcome.ABORTABLE_EPOCH_BUMP),
    ("add_partitions_to_txn", ErrorCode.topic_authorization_failed, Outcome.ABORTABLE),
    ("add_partitions_to_txn", ErrorCode.invalid_record, Outcome.ABORTABLE),  # unexpected: abortable here
    ("end_txn", ErrorCode.invalid_record, Outcome.FATAL),  # unexpected: fatal here
    ("txn_offset_commit", ErrorCode.unknown_member_id, Outcome.ABORTABLE),
])
def test_error_rules_follow_kafkas_transaction_manager(api: str, code: ErrorCode, expected: Outcome) -> None:
    assert outcome(api, code) is expected


def test_a_transactions_first_add_partitions_retries_concurrent_transactions_within_milliseconds() -> None:
    # the previous transaction's markers are still being written: clear within milliseconds
    first = [retry_backoff_s("add_partitions_to_txn", ErrorCode.concurrent_transactions, attempt, True, 0.1)
             for attempt in range(1, 7)]
    assert first == [0.002, 0.004, 0.008, 0.016, 0.02, 0.02]
    assert retry_backoff_s("add_partitions_to_txn", ErrorCode.concurrent_transactions, 1, True, 0.001) == 0.001


@pytest.mark.parametrize(("api", "code", "first_in_transaction"), [
    ("add_partitions_to_txn", ErrorCode.concurrent_transactions, False),  # a partition added later
    ("add_partitions_to_txn", ErrorCode.coordinator_load_in_progress, True),
    ("end_txn", ErrorCode.concurrent_transactions, True),
    ("init_producer_id", ErrorCode.concurrent_transactions, True),
])
def test_other_retries_wait_retry_backoff_ms(api: str, code: ErrorCode, first_in_transaction: bool) -> None:
    assert retry_backoff_s(api, code, 1, first_in_transaction, 0.1) == 0.1
