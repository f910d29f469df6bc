"""Random sequences of a producer's requests, timeouts, marker failures and coordinator
restarts against the transaction coordinator (real ``__transaction_state`` on disk), checked
against a model of what must happen: every transaction that was open ends with exactly one
outcome, each of its partitions gets that outcome's marker (a restart may repeat one), a
new transaction never starts before the previous one's markers are all written, and an open
transaction survives restarts with its partitions."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from pulllog.broker.topics import TopicManager
from pulllog.log import LogConfig
from pulllog.txn.coordinator import AddPartitionsRequest, EndTxnRequest, InitProducerIdRequest, TransactionCoordinator

TX, TIMEOUT_MS = "tx", 10_000
PARTITIONS = [("a", 0), ("a", 1), ("b", 0)]

_ops = st.lists(st.one_of(
    st.just(("init",)),
    st.tuples(st.just("add"), st.sets(st.sampled_from(PARTITIONS), min_size=1)),
    st.tuples(st.just("end"), st.booleans()),
    st.just(("timeout",)),
    st.just(("restart",)),
    st.tuples(st.just("fail"), st.sets(st.sampled_from(PARTITIONS))),
    st.just(("retry",)),
), max_size=30)


class Markers:
    def __init__(self) -> None:
        self.written: list[tuple[bool, tuple[str, int]]] = []
        self.failing: set[tuple[str, int]] = set()

    def __call__(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                 partitions: Sequence[tuple[str, int]]) -> Mapping[tuple[str, int], ErrorCode]:
        codes = {}
        for tp in partitions:
            if tp in self.failing:
                codes[tp] = ErrorCode.kafka_storage_error
            else:
                self.written.append((commit, tp))
                codes[tp] = ErrorCode.none
        return codes


@settings(max_examples=60)
@given(_ops)
def test_every_open_transaction_ends_once_with_all_its_markers(ops: list[tuple]) -> None:  # type: ignore[type-arg]
    with tempfile.TemporaryDirectory() as tmp:
        now = [1_800_000_000_000]
        markers = Markers()
        ids = iter(range(100, 10_000))
        topics = TopicManager(Path(tmp), LogConfig())
        topics.load()

        def coordinator() -> TransactionCoordinator:
            return TransactionCoordinator(topics, markers, lambda: next(ids), state_partitions=2,
                                          clock=lambda: now[0])

        c = coordinator()
        producer: tuple[int, int] | None = None
        open_parts: set[tuple[str, int]] | None = None  # the model: the open transaction's partitions
        outcomes: list[tuple[bool, frozenset[tuple[str, int]], int]] = []  # (commit, partitions, first marker index)

        def decide(commit: bool, start: int) -> None:
            nonlocal open_parts
            assert open_parts
            outcomes.append((commit, frozenset(open_parts), start))
            open_parts = None

        try:
            for op in ops:
                start = len(markers.written)
                if op[0] == "init":
                    result = c.init_producer_id(InitProducerIdRequest(TX, TIMEOUT_MS))
                    if open_parts is not None:
                        assert result.error == ErrorCode.concurrent_transactions  # fenced: aborted first
                        decide(False, start)
                    elif result.error == ErrorCode.none:
                        producer = (result.producer_id, result.producer_epoch)
                    else:
                        assert result.error == ErrorCode.concurrent_transactions  # markers still missing
                elif op[0] == "add" and producer is not None:
                    codes = c.add_partitions(AddPartitionsRequest(TX, *producer, tuple(sorted(op[1]))))
                    if set(codes.values()) == {ErrorCode.none}:
                        open_parts = (open_parts or set()) | op[1]
                    else:
                        assert open_parts is None
                elif op[0] == "end" and producer is not None:
                    code = c.end_txn(EndTxnRequest(TX, *producer, op[1]))
                    if open_parts is not None:
                        assert code == ErrorCode.none
                        decide(op[1], start)
                    else:
                        assert code != ErrorCode.none or (outcomes and outcomes[-1][0] == op[1])
                elif op[0] == "timeout":
                    now[0] += TIMEOUT_MS + 1
                    aborted = c.abort_timed_out()
                    assert aborted == (1 if open_parts is not None else 0)
                    if open_parts is not None:
                        decide(False, start)
                elif op[0] == "restart":
                    c = coordinator()
                    c.load()
                elif op[0] == "fail":
                    markers.failing = set(op[1])
                elif op[0] == "retry":
                    c.complete_pending()
                described = c.describe(TX)
                if open_parts is not None:
                    assert (described.state, set(described.partitions)) == ("Ongoing", open_parts)
            markers.failing = set()
            c.complete_pending()
            assert c.describe(TX).state in ("", "Empty", "CompleteCommit", "CompleteAbort", "Ongoing")
            bounds = [start for _c, _p, start in outcomes] + [len(markers.written)]
            for (commit, parts, first), end in zip(outcomes, bounds[1:]):
                segment = markers.written[first:end]
                assert {tp for _c, tp in segment} == parts
                assert {c for c, _tp in segment} == {commit}
        finally:
            topics.close()
