"""How every pulllog command fails: one line on stderr, a meaningful exit code, no traceback.

Exit codes shared by all commands:

    0  success
    1  the command ran and found a problem (``inspect segment --verify`` on a damaged file)
    2  the command could not run: bad usage, a missing or unreadable file
    130 interrupted by Ctrl-C (SIGINT), 143 stopped by SIGTERM: 128 + the signal number, as
        shells expect; ``pulllog.cli.main`` maps a KeyboardInterrupt anywhere to 130
"""

from __future__ import annotations

import signal
from typing import IO, Any

import click

__all__ = ["EXIT_PROBLEM", "EXIT_USAGE", "CliError", "exit_for_signal"]

EXIT_PROBLEM = 1
EXIT_USAGE = 2


class CliError(click.ClickException):
    """Printed as ``error: <message>`` on stderr; click turns it into the exit code."""

    def __init__(self, message: str, exit_code: int = EXIT_PROBLEM) -> None:
        super().__init__(message)
        self.exit_code = exit_code

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: {self.format_message()}", file=file, err=file is None)


def exit_for_signal(signum: int) -> click.exceptions.Exit:
    """The exit a shell expects after ``signum``: 128 + its number (Ctrl-C: 130)."""
    return click.exceptions.Exit(128 + int(signal.Signals(signum)))
