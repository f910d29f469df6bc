"""Ctrl-C and SIGTERM as a shell user sends them: real processes, real signals (os.kill).

Exit 128 + the signal (130 for SIGINT, 143 for SIGTERM), no traceback, and a group member
commits what it printed and leaves the group on the way out, so the group is Empty at once
instead of Stable until the session timeout.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from pulllog.client.admin import Admin
from pulllog.client.types import TopicPartition
from pulllog.testing import BrokerThread

PULLLOG = [sys.executable, "-m", "pulllog.cli.main"]


def cli(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*PULLLOG, *args], input=stdin, capture_output=True, timeout=60, check=False)


@pytest.fixture
def proc() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
            p.wait()


def describe(bs: str, group: str) -> tuple[str, int, dict[TopicPartition, int]]:
    async def body() -> tuple[str, int, dict[TopicPartition, int]]:
        async with Admin(bs) as admin:
            desc = await admin.describe_group(group)
            offsets = await admin.list_group_offsets(group)
        return desc.state, len(desc.members), {tp: o for tp, (o, _m) in offsets.items()}

    return asyncio.run(body())


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_on_consume_group_commits_what_was_printed_and_leaves_the_group(
        pulllog_broker: BrokerThread, proc: list[subprocess.Popen[bytes]], sig: signal.Signals) -> None:
    bs = pulllog_broker.bootstrap_servers
    assert cli("produce", "signalled", "--bootstrap-server", bs, stdin=b"a\nb\nc\n").returncode == 0
    p = subprocess.Popen([*PULLLOG, "consume", "signalled", "--group", "watchers", "--follow",
                          "--bootstrap-server", bs], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.append(p)
    assert p.stdout is not None and p.stderr is not None
    assert [p.stdout.readline() for _ in range(3)] == [b"a\n", b"b\n", b"c\n"]
    state, members, _ = describe(bs, "watchers")
    assert (state, members) == ("Stable", 1)  # it printed, so it joined: a member now

    os.kill(p.pid, sig)

    assert p.wait(30) == 128 + sig
    assert b"Traceback" not in p.stderr.read()
    state, members, committed = describe(bs, "watchers")
    assert (state, members) == ("Empty", 0)  # left at once, not after the session timeout
    assert committed == {TopicPartition("signalled", 0): 3}
    assert cli("group", "delete", "watchers", "--bootstrap-server", bs).returncode == 0


def test_ctrl_c_on_produce_reading_a_terminal_like_pipe_exits_130(pulllog_broker: BrokerThread,
                                                                  proc: list[subprocess.Popen[bytes]]) -> None:
    bs = pulllog_broker.bootstrap_servers
    p = subprocess.Popen([*PULLLOG, "produce", "typed", "--bootstrap-server", bs],
                         stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.append(p)
    assert p.stdin is not None and p.stderr is not None
    p.stdin.write(b"first line\n")
    p.stdin.flush()
    # The first send asks for the topic's metadata (creating it), then produce waits for the
    # next line: the topic existing is the sign it reached the blocking read.
    while b"typed" not in cli("topic", "list", "--bootstrap-server", bs).stdout:
        assert p.poll() is None
    os.kill(p.pid, signal.SIGINT)
    assert p.wait(30) == 130
    err = p.stderr.read()
    assert b"Traceback" not in err and b"Aborted" not in err


# A Ctrl-C that lands while modules load or while a synchronous command (export's Spark run)
# works arrives as KeyboardInterrupt. An import hook raises it at a chosen import, so the test
# does not depend on when a signal happens to land.
_INTERRUPT_AT_IMPORT = """
import runpy, sys
class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            raise KeyboardInterrupt
sys.meta_path.insert(0, Interrupt())
sys.argv = ["pulllog", *{args!r}]
runpy.run_module("pulllog.cli.main", run_name="__main__")
"""


@pytest.mark.parametrize("module, args", [
    ("pulllog.cli.consume", ["--help"]),  # while the command modules are imported
    ("pulllog.spark.export", ["export", "--parquet", "out", "--topic", "t", "--engine", "arrow"]),  # mid-command
])
def test_keyboard_interrupt_anywhere_is_exit_130_without_a_traceback(module: str, args: list[str], tmp_path) -> None:
    result = subprocess.run([sys.executable, "-c", _INTERRUPT_AT_IMPORT.format(module=module, args=args)],
                            capture_output=True, timeout=60, cwd=tmp_path, check=False)
    assert result.returncode == 130, result.stderr
    assert b"Traceback" not in result.stderr and b"Aborted" not in result.stderr
