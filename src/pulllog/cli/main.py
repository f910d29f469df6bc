"""The ``pulllog`` command (pyproject: ``pulllog = "pulllog.cli.main:main"``).

Each command or command group lives in its own module under ``pulllog.cli`` and is registered
here with one import and one ``add_command`` line; keep this file that small. Commands fail
through ``pulllog.cli.errors.CliError``: one line on stderr, never a traceback.
"""

from __future__ import annotations

import signal
import sys

try:
    # Importing every command takes a moment (rich, the client library): a Ctrl-C meanwhile
    # ends the program as Ctrl-C should (exit 130), not with a KeyboardInterrupt traceback.
    from typing import Any

    import click

    from .consume import consume, tail
    from .errors import exit_for_signal
    from .export import export
    from .group import group
    from .inspect import inspect
    from .perf import perf
    from .produce import produce
    from .serve import serve
    from .topic import topic
except KeyboardInterrupt:
    sys.exit(130)

__all__ = ["main"]


class _Pulllog(click.Group):
    """Click prints "Aborted!" and exits 1 on a KeyboardInterrupt; shells expect 130."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise exit_for_signal(signal.SIGINT) from None


@click.group(cls=_Pulllog, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="pulllog", prog_name="pulllog")
def main() -> None:
    """pulllog: a log broker that speaks the Kafka wire protocol."""


main.add_command(consume)
main.add_command(export)
main.add_command(group)
main.add_command(inspect)
main.add_command(perf)
main.add_command(produce)
main.add_command(serve)
main.add_command(tail)
main.add_command(topic)


if __name__ == "__main__":
    main()
