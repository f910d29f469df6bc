"""Exactly-once under crashes (issue 14): a consume-transform-produce loop SIGKILLed and
restarted 10 times, the broker SIGKILLed and restarted in between, and the output topic read
read_committed holds each input record exactly once.

A small instance of scripts/eos_crash.py (which describes the loop, the kill moments and the
checks); the script runs longer ones. The moments are states the worker reports (after its
k-th commit, with records of an open transaction sent, after the offsets were added, with
EndTxn on its way), chosen by a seeded plan; the seed is in the test's id and in the failure
message, and ``PULLLOG_EOS_SEED`` replaces it to replay or explore.

librdkafka's loop runs without broker kills: after a broker restart librdkafka 2.16's
``send_offsets_to_transaction`` can wait forever (its AddOffsetsToTxn succeeds, the
TxnOffsetCommit is never sent and the call's timeout is not honoured; librdkafka issues
#5456 and #5511 describe this), which would stop the loop, not break exactly-once.
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
    ("librdkafka", 0, 3),
], ids=["pulllog-seed4", "librdkafka-seed3"])
def test_a_loop_killed_10_times_outputs_each_input_record_exactly_once(
        tmp_path: Path, client: str, broker_kills: int, seed: int) -> None:
    seed = int(os.environ.get("PULLLOG_EOS_SEED", seed))
    outcome = eos_crash.run(seed, KILLS, broker_kills, RECORDS, client, MAX_RECORDS, tmp_path)
    assert outcome.ok, outcome.summary() + f" (plan and events: {tmp_path})\n" + "\n".join(outcome.log)
    kills = [line for line in outcome.log if "worker SIGKILLed" in line]
    assert len(kills) == KILLS, "\n".join(outcome.log)
    assert sum("broker SIGKILLed" in line for line in outcome.log) == broker_kills, "\n".join(outcome.log)
