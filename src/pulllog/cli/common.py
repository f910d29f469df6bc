"""What every command that talks to a broker shares: ``--bootstrap-server``, running an
async body, and turning client errors into one line.

    @click.command()
    @bootstrap_server_option
    def produce(bootstrap_server: str, ...) -> None:
        run_async(_produce, bootstrap_server, ...)

``run_async`` is the one place where client exceptions meet the terminal: a broker that
cannot be reached, a Kafka error code, a bad argument the library rejected each become
``CliError`` (``error: <message>`` on stderr), never a traceback.

Exit codes (see ``pulllog.cli.errors``): 1 for anything the broker or the network said
(unreachable, unknown topic, topic already exists, ...), 2 for bad usage, 128 + the signal
number after Ctrl-C (130) or SIGTERM (143), as shells expect.

Signals: by default SIGINT and SIGTERM cancel the command's coroutine, so its ``async with``
blocks run (a group member commits what it printed and leaves the group) before the exit.
A command that blocks outside the event loop (``produce`` reading a terminal) asks for
``interrupt=True`` instead: SIGINT raises KeyboardInterrupt wherever it lands, as Python's default.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import signal
import threading
from collections.abc import Callable, Coroutine, Iterable, Iterator
from typing import Any, TypeVar

import click
from rich.console import Console

from ..client.cluster import DEFAULT_BOOTSTRAP
from ..client.errors import BrokerUnreachableError, ConnectionClosedError, KafkaError, UnsupportedByBrokerError
from .errors import EXIT_PROBLEM, EXIT_USAGE, CliError, exit_for_signal

__all__ = ["BOOTSTRAP_ENV", "bootstrap_server_option", "console", "parse_assignments", "run_async",
           "signals_stop_here"]

BOOTSTRAP_ENV = "PULLLOG_BOOTSTRAP_SERVERS"

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def bootstrap_server_option(fn: F) -> F:
    """``--bootstrap-server HOST:PORT[,HOST:PORT...]``, passed as ``bootstrap_server``."""
    return click.option(
        "--bootstrap-server", "bootstrap_server",
        envvar=BOOTSTRAP_ENV, default=DEFAULT_BOOTSTRAP, show_default=True, show_envvar=True,
        metavar="HOST:PORT[,...]",
        help="Broker(s) to bootstrap from.",
    )(fn)


class _Stopped(Exception):
    """The command's coroutine was cancelled by a signal and has cleaned up."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


# The signals run_async's handler received, for signals_stop_here (None outside run_async).
_RECEIVED: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("pulllog_cli_signals", default=None)


@contextlib.contextmanager
def signals_stop_here() -> Iterator[None]:
    """Code inside that a SIGINT / SIGTERM cancels raises _Stopped instead, with the task's
    cancellation withdrawn, so the cleanup around it runs as after any error instead of being
    cancelled itself: a Consumer closed from a task still being cancelled skips LeaveGroup,
    and the member would hold its partitions until the session timeout."""
    try:
        yield
    except asyncio.CancelledError:
        received = _RECEIVED.get()
        task = asyncio.current_task()
        if not received or task is None:
            raise
        task.uncancel()
        raise _Stopped(received[0]) from None


async def _until_signal(coro: Coroutine[Any, Any, T], interrupt: bool) -> T:
    """Await ``coro``; SIGINT / SIGTERM cancel it (unless ``interrupt``) and raise _Stopped."""
    if threading.current_thread() is not threading.main_thread():
        return await coro  # signal handlers can only be set in the main thread
    if interrupt:
        # asyncio.run's own SIGINT handler only cancels the task: a blocking read of stdin
        # would be retried and Ctrl-C ignored until the next line arrives.
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            return await coro
        finally:
            signal.signal(signal.SIGINT, previous)
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    received: list[int] = []
    _RECEIVED.set(received)

    def on_signal(signum: int) -> None:
        received.append(signum)
        task.cancel()

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        return await coro
    except asyncio.CancelledError:
        if received:  # cancelled by the signal outside signals_stop_here
            raise _Stopped(received[0]) from None
        raise
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)


def run_async(fn: Callable[..., Coroutine[Any, Any, T]], *args: Any, interrupt: bool = False, **kwargs: Any) -> T:
    """``asyncio.run(fn(*args, **kwargs))``, with client errors as a one-line CliError and
    SIGINT / SIGTERM as exit 130 / 143 after the coroutine cleaned up (see the module doc)."""
    try:
        return asyncio.run(_until_signal(fn(*args, **kwargs), interrupt))
    except _Stopped as exc:
        raise exit_for_signal(exc.signum) from None
    except KeyboardInterrupt:
        raise exit_for_signal(signal.SIGINT) from None
    except CliError:
        raise
    except BrokerUnreachableError as exc:
        raise CliError(str(exc), EXIT_PROBLEM) from None
    except ConnectionClosedError as exc:
        raise CliError(f"{exc}; is the broker still running?", EXIT_PROBLEM) from None
    except (KafkaError, UnsupportedByBrokerError) as exc:
        raise CliError(str(exc), EXIT_PROBLEM) from None
    except (asyncio.TimeoutError, TimeoutError) as exc:
        raise CliError(f"timed out waiting for the broker{': ' + str(exc) if str(exc) else ''}", EXIT_PROBLEM) from None
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def parse_assignments(items: Iterable[str], option: str, example: str) -> dict[str, str]:
    """``("a=1", "b=2")`` -> ``{"a": "1", "b": "2"}`` for a repeatable NAME=VALUE option."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise CliError(f"{option} {item!r}: expected NAME=VALUE, e.g. {option} {example}", EXIT_USAGE)
        out[name.strip()] = value.strip()
    return out


def console() -> Console:
    """A rich Console for tables: colour on terminals; piped output keeps one line per row
    rather than wrapping at 80 columns."""
    out = Console(markup=False, emoji=False, highlight=False)
    if not out.is_terminal and "COLUMNS" not in os.environ:
        out = Console(markup=False, emoji=False, highlight=False, width=1000)
    return out
