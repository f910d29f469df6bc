"""The transaction state table and the ``__transaction_state`` record formats."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pulllog.net.coordinator_keys import partition_for
from pulllog.txn.records import TransactionLogValue, decode_key, decode_value, encode_key, encode_value
from pulllog.txn.state import Effect, Event, IllegalTransitionError, TxnState, step


def test_every_state_round_trips_its_kafka_id_and_name() -> None:
    assert [s.id for s in TxnState] == list(range(8))
    for state in TxnState:
        assert TxnState.from_id(state.id) is state
        assert TxnState.from_name(state.kafka_name) is state
    assert TxnState.from_name("Preparing") is None


def test_a_commit_logs_prepare_then_writes_markers_then_completes() -> None:
    prepare = step(TxnState.ONGOING, Event.COMMIT)
    assert prepare.next is TxnState.PREPARE_COMMIT
    assert prepare.effects == (Effect.WRITE_STATE, Effect.WRITE_MARKERS)  # logged before any marker
    done = step(TxnState.PREPARE_COMMIT, Event.MARKERS_WRITTEN)
    assert done.next is TxnState.COMPLETE_COMMIT and Effect.CLEAR_PARTITIONS in done.effects


def test_init_during_an_open_transaction_fences_aborts_and_asks_the_client_to_retry() -> None:
    fence = step(TxnState.ONGOING, Event.INIT)
    assert fence.next is TxnState.PREPARE_EPOCH_FENCE
    assert fence.effects == (Effect.FENCE_EPOCH, Effect.THEN_ABORT)
    assert fence.answer == "concurrent_transactions"
    assert step(TxnState.PREPARE_EPOCH_FENCE, Event.ABORT).next is TxnState.PREPARE_ABORT
    assert step(TxnState.ONGOING, Event.TIMEOUT) == fence


@pytest.mark.parametrize("state", [TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT])
def test_requests_while_markers_are_written_are_retried_later(state: TxnState) -> None:
    for event in (Event.INIT, Event.ADD_PARTITIONS):
        assert step(state, event).next is None and step(state, event).answer == "concurrent_transactions"


def test_a_retried_end_txn_of_a_complete_outcome_is_answered_none_and_a_contrary_one_is_illegal() -> None:
    assert step(TxnState.COMPLETE_COMMIT, Event.COMMIT).answer == "none"
    assert step(TxnState.COMPLETE_ABORT, Event.ABORT).answer == "none"
    with pytest.raises(IllegalTransitionError, match="CompleteCommit cannot take the event: EndTxn\\(abort"):
        step(TxnState.COMPLETE_COMMIT, Event.ABORT)
    with pytest.raises(IllegalTransitionError):
        step(TxnState.EMPTY, Event.COMMIT)
    with pytest.raises(IllegalTransitionError):
        step(TxnState.PREPARE_COMMIT, Event.ABORT)


def test_only_idle_ids_expire() -> None:
    for state in TxnState:
        expires = (state, Event.EXPIRE)
        if state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            assert step(*expires).next is TxnState.DEAD
        else:
            with pytest.raises(IllegalTransitionError):
                step(*expires)


_values = st.builds(
    TransactionLogValue,
    producer_id=st.integers(0, 2**63 - 1), producer_epoch=st.integers(0, 2**15 - 1),
    timeout_ms=st.integers(1, 2**31 - 1), state_id=st.integers(1, 7),
    partitions=st.lists(st.tuples(st.text(min_size=1, max_size=20), st.integers(0, 2**31 - 1)), unique=True,
                        max_size=10).map(lambda ps: tuple(sorted(ps))),
    last_update_timestamp=st.integers(-1, 2**62), start_timestamp=st.integers(-1, 2**62),
    previous_producer_id=st.integers(-1, 2**62), next_producer_id=st.integers(-1, 2**62))


@given(_values, st.sampled_from([0, 1]))
def test_values_round_trip(value: TransactionLogValue, version: int) -> None:
    decoded = decode_value(encode_value(value, version))
    if version == 0:  # v0 has no tagged fields
        value = TransactionLogValue(*[getattr(value, f) for f in TransactionLogValue.__slots__][:7])
    assert decoded == value


@given(st.text(min_size=1))
def test_keys_round_trip(transactional_id: str) -> None:
    assert decode_key(encode_key(transactional_id)) == transactional_id


def test_an_id_lands_where_kafka_puts_it() -> None:
    # Java: Math.abs("my-txn".hashCode()) % 50; "my-txn".hashCode() == -1061187895
    assert partition_for("my-txn", 50) == 1061187895 % 50
