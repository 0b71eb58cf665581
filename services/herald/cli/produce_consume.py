"""`herald produce` (cli/produce.py) and `herald consume` (cli/consume.py), added together to the
`herald` command."""

from __future__ import annotations

import argparse

from herald.cli.consume import add_consume_command
from herald.cli.produce import add_produce_command


def add_produce_consume_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `produce` and `consume` to the `herald` command's subparsers."""
    add_produce_command(commands)
    add_consume_command(commands)
