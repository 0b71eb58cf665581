"""Every argument of every `herald` command says what it is for: the test builds the whole parser,
walks every subcommand and every action, and lists each argument without help text (positional or
optional; -h/--help and hidden ones, such as deprecated spellings, aside)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from herald.cli.main import build_parser


def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ("herald",)) -> Iterator[
        tuple[tuple[str, ...], argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


def missing_help() -> list[str]:
    missing: list[str] = []
    for path, parser in _parsers(build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
                continue
            if isinstance(action, argparse._SubParsersAction):
                # The subcommands are its arguments: each one's help is its line in the listing.
                described = {choice.dest for choice in action._choices_actions if choice.help}
                missing += [f"{' '.join(path)} {name} (the command)" for name in action.choices
                            if name not in described]
                continue
            if not (action.help or "").strip():
                missing.append(f"{' '.join(path)} {'/'.join(action.option_strings) or action.metavar or action.dest}")
    return missing


def test_the_walk_reaches_every_command_family() -> None:
    paths = {" ".join(path) for path, _ in _parsers(build_parser())}
    assert {"herald standalone", "herald produce", "herald consume", "herald admin topics stats",
            "herald perf end-to-end", "herald context add", "herald completion", "herald operator"} <= paths


def test_every_argument_of_every_command_has_help() -> None:
    missing = missing_help()
    assert not missing, f"{len(missing)} argument(s) without help:\n" + "\n".join(missing)
