"""Every `workhorse ...` command shown in the docs and the README names a command that exists,
with options it takes: each is parsed by the click commands themselves (nothing runs)."""

from __future__ import annotations

import click
import pytest

from docblocks import SHELL, Block, blocks, cli_lines, pages
from workhorse.cli import cli


def shell_blocks() -> list[Block]:
    return [b for p in pages() for b in blocks(p) if b.language in SHELL]


def commands() -> list[tuple[str, list[str]]]:
    return [(b.where, argv) for b in shell_blocks() for argv in cli_lines(b)]


def remaining(ctx: click.Context) -> list[str]:
    # click 8.2 keeps a group's subcommand words apart from ctx.args (public again in click 9)
    return [*getattr(ctx, "_protected_args", []), *ctx.args]


def parse(argv: list[str]) -> None:
    """Parse argv down the command tree as `workhorse` would, invoking nothing."""
    ctx = cli.make_context("workhorse", list(argv))
    command: click.Command = cli
    rest = remaining(ctx)
    while isinstance(command, click.Group) and rest:
        name, sub, rest = command.resolve_command(ctx, rest)
        assert sub is not None and name is not None
        ctx = sub.make_context(name, rest, parent=ctx)
        command, rest = sub, remaining(ctx)
    assert not rest or not isinstance(command, click.Group), f"unparsed: {rest}"


def test_the_docs_show_the_cli() -> None:
    assert len(commands()) >= 40


@pytest.mark.parametrize(("where", "argv"), commands(), ids=[w for w, _ in commands()])
def test_the_command_exists_with_those_options(where: str, argv: list[str]) -> None:
    try:
        parse(argv)
    except click.exceptions.Exit:
        pass  # --help, --version: eager options that end parsing
    except click.UsageError as error:  # an unknown command or option, a missing argument
        pytest.fail(f"{where}: workhorse {' '.join(argv)}: {error.format_message()}")
