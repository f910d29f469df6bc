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
(unreachable, unknown topic, topic already exists, ...), 2 for bad usage.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, TypeVar

import click
from rich.console import Console

from ..client.cluster import DEFAULT_BOOTSTRAP
from ..client.errors import BrokerUnreachableError, ConnectionClosedError, KafkaError, UnsupportedByBrokerError
from .errors import EXIT_PROBLEM, EXIT_USAGE, CliError

__all__ = ["BOOTSTRAP_ENV", "bootstrap_server_option", "console", "parse_assignments", "run_async"]

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


def run_async(fn: Callable[..., Coroutine[Any, Any, T]], *args: Any, **kwargs: Any) -> T:
    """``asyncio.run(fn(*args, **kwargs))``, with client errors as a one-line CliError."""
    try:
        return asyncio.run(fn(*args, **kwargs))
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
