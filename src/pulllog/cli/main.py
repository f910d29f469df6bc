"""The ``pulllog`` command (pyproject: ``pulllog = "pulllog.cli.main:main"``).

Each command or command group lives in its own module under ``pulllog.cli`` and is named
here in one line of ``_COMMANDS``; keep this file that small. A command's module is imported
only when that command runs (or ``--help`` lists them all): ``pulllog serve`` must not pay for
the client library, rich tables or the export code, which start-up time shows (the README's
comparison with Kafka). Commands fail through ``pulllog.cli.errors.CliError``: one line on
stderr, never a traceback.
"""

from __future__ import annotations

import importlib
import signal
import sys
from typing import Any

try:
    import click

    from .errors import exit_for_signal
except KeyboardInterrupt:  # Ctrl-C while starting: exit as Ctrl-C should (130), no traceback
    sys.exit(130)

__all__ = ["main"]

_COMMANDS: dict[str, tuple[str, str]] = {
    # command name -> (module under pulllog.cli, attribute)
    "cluster": ("cluster", "cluster"),
    "consume": ("consume", "consume"),
    "export": ("export", "export"),
    "group": ("group", "group"),
    "inspect": ("inspect", "inspect"),
    "leader-election": ("leader_election", "leader_election"),
    "perf": ("perf", "perf"),
    "produce": ("produce", "produce"),
    "serve": ("serve", "serve"),
    "tail": ("consume", "tail"),
    "topic": ("topic", "topic"),
    "transactions": ("transactions", "transactions"),
}


class _Pulllog(click.Group):
    """Commands imported on first use. Click prints "Aborted!" and exits 1 on a
    KeyboardInterrupt; shells expect 130, also while a command's module is being imported."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in _COMMANDS:
            module, attr = _COMMANDS[cmd_name]
            try:
                command = getattr(importlib.import_module(f"{__package__}.{module}"), attr)
            except KeyboardInterrupt:
                sys.exit(130)
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise exit_for_signal(signal.SIGINT) from None


@click.group(cls=_Pulllog, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="pulllog", prog_name="pulllog")
def main() -> None:
    """pulllog: a log broker that speaks the Kafka wire protocol."""


if __name__ == "__main__":
    main()
