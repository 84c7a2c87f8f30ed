"""`cairn ... --help`: each command and subcommand says what it does, not only how to call it."""
from __future__ import annotations

import argparse
from collections.abc import Iterator

from cairn import cli


Command = tuple[tuple[str, ...], argparse.ArgumentParser]


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[Command]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, command in action.choices.items():
                yield (*path, name), command
                yield from _commands(command, (*path, name))


def test_each_command_says_what_it_does_in_its_own_help():
    """`cairn ingest --help` showed only its usage line: each summary was only in the parent's list."""
    commands = dict(_commands(cli._parser()))
    assert {("up",), ("ingest",), ("user", "set-role"), ("eval",), ("ask",)} <= set(commands)
    for path, command in commands.items():
        assert command.description and command.description.endswith("."), path


def test_ingest_names_every_type_it_reads():
    from cairn.ingest import SUFFIXES

    help_text = dict(_commands(cli._parser()))[("ingest",)].format_help()
    assert all(suffix in help_text for suffix in SUFFIXES)
