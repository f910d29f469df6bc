"""Exactly-once under crashes (issue 14): a consume-transform-produce loop SIGKILLed and
restarted 10 times, the broker SIGKILLed and restarted in between, and the output topic read
read_committed holds each input record exactly once.

A small instance of scripts/eos_crash.py (which describes the loop, the kill moments and the
checks); the script runs longer ones. The moments are states the worker reports (after its
k-th commit, with records of an open transaction sent, after the offsets were added, with
EndTxn on its way), chosen by a seeded plan; the seed is in the test's id and in the failure
message, and ``PULLLOG_EOS_SEED`` replaces it to replay or explore.

Both loops run with broker kills. librdkafka's worker sets metadata.recovery.strategy=none:
with its default re-bootstrap, librdkafka 2.16's ``send_offsets_to_transaction`` can wait
forever after the restart of a one-broker cluster, Apache Kafka's as pulllog's (librdkafka
#5511; see scripts/eos_crash.py). The group's members survive the broker's restarts (as in
Kafka), so no transaction is aborted because its group forgot the member (UNKNOWN_MEMBER_ID).
"""

from __future__ import annotations

import os
from pathlib import Path

import eos_crash
import pytest

KILLS = 10
RECORDS = 500  # the 10 rounds consume at most about 400 (a few transactions of 10 each): a final run remains
MAX_RECORDS = 10


@pytest.mark.parametrize(("client", "broker_kills", "seed"), [
    ("pulllog", 3, 4),
    ("librdkafka", 3, 1),
], ids=["pulllog-seed4", "librdkafka-seed1"])
def test_a_loop_killed_10_times_outputs_each_input_record_exactly_once(
        tmp_path: Path, client: str, broker_kills: int, seed: int) -> None:
    seed = int(os.environ.get("PULLLOG_EOS_SEED", seed))
    outcome = eos_crash.run(seed, KILLS, broker_kills, RECORDS, client, MAX_RECORDS, tmp_path)
    assert outcome.ok, outcome.summary() + f" (plan and events: {tmp_path})\n" + "\n".join(outcome.log)
    kills = [line for line in outcome.log if "worker SIGKILLed" in line]
    assert len(kills) == KILLS, "\n".join(outcome.log)
    assert sum("broker SIGKILLed" in line for line in outcome.log) == broker_kills, "\n".join(outcome.log)
    # A broker that forgot the group's members answered the first TxnOffsetCommit after its
    # restart UNKNOWN_MEMBER_ID. FENCED_INSTANCE_ID is not checked: a member that reconnects
    # later than its session timeout after the restart is removed (as by Kafka), and its
    # rejoin under a new member id can race the producer's copy of the group metadata.
    forgotten = [line for line in outcome.log if "aborts" in line and "UNKNOWN_MEMBER" in line.upper()]
    assert not forgotten, "the group forgot its member across a broker restart:\n" + "\n".join(forgotten)
