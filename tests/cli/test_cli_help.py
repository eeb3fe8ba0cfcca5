"""Every command and every option says what it is for in `--help`: the test walks the whole click
command tree (subcommands loaded as `a3fast` loads them). click gives arguments no help of their
own; a command's help text describes them."""
from __future__ import annotations

import click

from a3fast.cli import COMMANDS, main


def commands(command: click.Command, path: tuple[str, ...] = ("a3fast",)):
    """(path, command) for every command under `command`, groups included."""
    yield path, command
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        for name in command.list_commands(ctx):
            yield from commands(command.get_command(ctx, name), path + (name,))


def test_the_walk_reaches_every_command():
    reached = {path[1] for path, _ in commands(main) if len(path) > 1}
    assert reached == set(COMMANDS)


def test_rule_every_command_has_help():
    assert [" ".join(p) for p, c in commands(main) if not (c.help or "").strip()] == []


def test_rule_every_option_of_every_command_has_help():
    missing = [f"{' '.join(path)} {'/'.join(option.opts)}" for path, command in commands(main)
               for option in command.params
               if isinstance(option, click.Option) and not option.hidden and not (option.help or "").strip()]
    assert missing == []
