"""What `herald produce` and `herald consume` share: the --url option (in one place, so a change of
its default is a one-line edit), how a time is read (`--event-time`, `--time`: unix milliseconds or
ISO 8601), and how a client command ends (exit 0 ok, 1 the operation failed, 2 usage)."""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from collections.abc import Callable
from typing import NoReturn

from herald.cli.client_options import URL_HELP
from herald.cli.vocabulary import EXIT_FAILED, EXIT_OK, EXIT_USAGE, deprecated_alias
from herald.common.errors import HeraldError, InvalidArgumentError


def add_url_option(parser: argparse.ArgumentParser) -> None:
    """--url, with --service-url as its deprecated spelling. Left None here: main resolves it with the
    other client options (flag > HERALD_SERVICE_URL > context > default, client_options.py)."""
    url = parser.add_argument("--url", default=None, metavar="URL", help=URL_HELP)
    deprecated_alias(parser, "--service-url", url)


def time_ms(text: str) -> int:
    """Unix milliseconds, from an integer (milliseconds) or an ISO 8601 time (UTC when it names no
    zone), for argparse's `type=`."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid time {text!r}: give unix milliseconds (1732665600000) or ISO 8601 "
            "(2026-11-27T00:00:00Z)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return int(when.timestamp() * 1000)


def usage_error(command: str, message: str) -> NoReturn:
    """Options that do not go together: one line and exit 2, as argparse does for its own checks."""
    print(f"herald {command}: error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(EXIT_USAGE)


def run_client_command(command: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> None:
    """Run a client command: a Herald error is one line on stderr and exit 1 (2 for an invalid
    argument, a usage error), never a traceback; the command's own status otherwise."""
    try:
        status = command(args)
    except BrokenPipeError:
        # The reader of our output went away (`herald consume ... | head -3`): what it took is
        # what it wanted. Output still buffered must not raise again at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(EXIT_OK) from None
    except InvalidArgumentError as error:
        print(f"herald {args.command}: error: {error}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_USAGE) from None
    except HeraldError as error:
        print(f"herald {args.command}: error: {error}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_FAILED) from None
    if status:
        raise SystemExit(status)
