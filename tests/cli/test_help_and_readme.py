"""What a new user reads first: every command's --help has examples, repeatable options say
so, the README's API table is one table, and its pytest-fixture recipes run."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from pulllog.cli.main import main

README = Path(__file__).resolve().parents[2] / "README.md"


def commands(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    found: list[tuple[tuple[str, ...], click.Command]] = []
    ctx = click.Context(group)
    for name in group.list_commands(ctx):  # not group.commands: the CLI imports commands lazily
        command = group.get_command(ctx, name)
        assert command is not None, name
        found.append(((*path, name), command))
        if isinstance(command, click.Group):
            found += commands(command, (*path, name))
    return found


ALL = commands(main)


@pytest.mark.parametrize("path", [" ".join(p) for p, _ in ALL])
def test_every_help_ends_with_examples_of_that_command(path: str) -> None:
    result = CliRunner().invoke(main, [*path.split(), "--help"])
    assert result.exit_code == 0
    examples = result.stdout.split("Examples:\n", 1)
    assert len(examples) == 2, f"`pulllog {path} --help` has no examples"
    lines = [line.strip() for line in examples[1].splitlines() if line.strip()]
    assert lines and all(line.startswith(f"pulllog {path}") or line.startswith(("seq ", "printf "))
                         for line in lines), lines
    assert any(f"pulllog {path}" in line for line in lines)


@pytest.mark.parametrize("path, option", [(" ".join(p), o.name) for p, c in ALL for o in c.params
                                          if isinstance(o, click.Option) and o.multiple])
def test_repeatable_options_say_so(path: str, option: str) -> None:
    command = dict((" ".join(p), c) for p, c in ALL)[path]
    (param,) = [o for o in command.params if o.name == option]
    assert "repeatable" in (param.help or ""), f"pulllog {path} {param.opts[0]}"


def test_the_readme_api_table_is_one_table() -> None:
    lines = README.read_text().splitlines()
    start = lines.index("| API | versions | notes |")
    end = start
    while end + 1 < len(lines) and lines[end + 1].startswith("|"):
        end += 1
    rows = [line.split("|")[1].strip() for line in lines[start + 2:end + 1]]
    assert rows[0] == "Produce" and "FindCoordinator" in rows and rows[-1] == "DescribeLogDirs"


def readme_block_after(marker: str) -> str:
    """The indented code block that follows the paragraph containing ``marker``."""
    text = README.read_text()
    after = text[text.index(marker):]
    block = re.search(r"\n\n((?:    .*\n|\n)+)", after)
    assert block is not None
    return textwrap.dedent(block.group(1))


def test_the_readme_fixture_recipes_run_under_pytest(tmp_path: Path) -> None:
    session = readme_block_after("For one\nbroker **per session**")
    per_test = readme_block_after("To give the per-test fixture broker configs")
    (tmp_path / "conftest.py").write_text(session + "\nfrom pulllog.testing import BrokerThread\n" + per_test)
    (tmp_path / "test_recipes.py").write_text(textwrap.dedent("""
        import asyncio
        from pulllog import Admin

        def configs(bootstrap):
            async def body():
                async with Admin(bootstrap) as admin:
                    from pulllog.client.admin import ConfigResource
                    return await admin.describe_configs(ConfigResource.broker(0))
            return asyncio.run(body())

        def test_session_broker(kafka):
            assert configs(kafka.bootstrap_servers)["num.partitions"].value == "3"

        def test_session_broker_is_shared(kafka):
            assert configs(kafka.bootstrap_servers)["log.retention.ms"].value == "60000"

        def test_per_test_broker_with_configs(pulllog_broker):
            assert configs(pulllog_broker.bootstrap_servers)["auto.create.topics.enable"].value == "false"
    """))
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout
