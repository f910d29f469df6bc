"""The ``pulllog`` command (pyproject: ``pulllog = "pulllog.cli.main:main"``).

Each command or command group lives in its own module under ``pulllog.cli`` and is registered
here with one import and one ``add_command`` line; keep this file that small. Commands fail
through ``pulllog.cli.errors.CliError``: one line on stderr, never a traceback.
"""

from __future__ import annotations

import click

from .consume import consume, tail
from .export import export
from .group import group
from .inspect import inspect
from .perf import perf
from .produce import produce
from .serve import serve
from .topic import topic

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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
