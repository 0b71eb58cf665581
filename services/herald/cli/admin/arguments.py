"""The arguments of `herald admin`: the options every admin command takes (one definition, the parent
parser of `admin` and of each command), the value types of the commands' arguments (durations, sizes,
positions, times), and the command groups each resource module fills in."""

from __future__ import annotations

import argparse
import datetime
import re
from collections.abc import Awaitable, Callable
from typing import Any

from herald.cli.client_options import client_security_flags
from herald.cli.vocabulary import warn_deprecated
from herald.client.admin import AdminClient
from herald.client.config import InitialPosition

DEFAULT_URL = "herald://127.0.0.1:6660"
URL_HELP = ("a service URL, herald://host:port (lookup names a broker), or a broker's host:port "
            f"(default: $HERALD_SERVICE_URL, else {DEFAULT_URL})")

# How every admin command runs: with an open admin client and the parsed arguments; it returns the
# JSON document to print (with --json), or prints for people and returns None.
Handler = Callable[[AdminClient, argparse.Namespace], Awaitable[Any]]


class HeraldUsageError(Exception):
    """A usage mistake found after parsing (exit status 2, like argparse's own)."""


def common_options(*, inherited: bool) -> argparse.ArgumentParser:
    """The options every admin command takes, as a parent parser: --url, --json, --timeout and the
    client security flags (--auth-token-file, --tls-*). They may be given after `admin` or after the
    command, so the parser is made twice from this one definition: with defaults for `admin`, and
    `inherited` (no defaults) for each command, because argparse copies a subcommand's whole
    namespace over its parent's, and a command's default would hide the value given to `admin`."""
    def default(value: Any) -> Any:
        return argparse.SUPPRESS if inherited else value

    options = argparse.ArgumentParser(add_help=False)
    options.add_argument("--url", default=default(None),  # None: resolved by client_options (flag > env > context)
                         help=URL_HELP)
    options.add_argument("--json", action="store_true", default=default(False),
                         help="print one JSON document (for scripts) instead of tables")
    options.add_argument("--timeout", type=float, default=default(30.0), metavar="SECONDS",
                         help="give up on a call after this long (default 30)")
    client_security_flags(options, defaults="inherited" if inherited else "environment")
    return options


class CommandGroup:
    """The subcommands of one group (`herald admin topics ...`): each takes the common options and
    runs its handler."""

    def __init__(self, subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
                 common: argparse.ArgumentParser) -> None:
        self._subparsers = subparsers
        self._common = common

    def command(self, name: str, help_text: str, handler: Handler) -> argparse.ArgumentParser:
        parser = self._subparsers.add_parser(name, help=help_text, description=help_text, parents=[self._common])
        parser.set_defaults(admin_handler=handler)
        return parser

    def group(self, name: str, help_text: str, dest: str = "admin_command") -> CommandGroup:
        """A group of commands within this one (`herald admin topics partitions get`)."""
        parser = self._subparsers.add_parser(name, help=help_text, description=help_text)
        return CommandGroup(parser.add_subparsers(dest=dest, required=True, metavar="COMMAND"), self._common)


# ---- argument values ----

_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_DURATION = re.compile(r"^(-?\d+)([smhdw]?)$")
_SIZE = re.compile(r"^(-?\d+)([bkmgt]?)(?:i?b)?$")


def duration(text: str) -> int:
    """Seconds from "45s", "30m", "1h", "7d", "2w" or a plain number of seconds; -1 is unlimited."""
    match = _DURATION.match(text.strip().lower())
    if match is None:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}: use e.g. 30s, 10m, 1h, 7d, 2w (or -1)")
    value = int(match.group(1))
    return value if value < 0 else value * _DURATION_UNITS.get(match.group(2) or "s", 1)


def size(text: str) -> int:
    """Bytes from "512", "64K", "100M", "10G", "1T" (powers of 1024); -1 is unlimited."""
    match = _SIZE.match(text.strip().lower())
    if match is None:
        raise argparse.ArgumentTypeError(f"invalid size {text!r}: use e.g. 512, 64K, 100M, 10G (or -1)")
    value = int(match.group(1))
    return value if value < 0 else value * _SIZE_UNITS[match.group(2)]


def on_off(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("on", "true", "yes", "1"):
        return True
    if lowered in ("off", "false", "no", "0"):
        return False
    raise argparse.ArgumentTypeError(f"invalid value {text!r}: use on or off")


def non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"invalid count {text!r}: use a whole number, 0 or more")
    return value


def positive(text: str) -> int:
    value = non_negative(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"invalid count {text!r}: use a whole number, 1 or more")
    return value


def position(text: str) -> tuple[int, int]:
    """"ledger:entry" (a message id's first two parts; more parts are ignored)."""
    parts = text.split(":")
    try:
        if len(parts) < 2:
            raise ValueError
        return int(parts[0]), int(parts[1])
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid position {text!r}: use LEDGER:ENTRY, e.g. 12:0") from None


def start_position(text: str) -> InitialPosition | tuple[int, int]:
    lowered = text.strip().lower()
    if lowered == "earliest":
        return InitialPosition.Earliest
    if lowered == "latest":
        return InitialPosition.Latest
    return position(text)


def publish_time(text: str) -> int:
    """Unix milliseconds, or an ISO 8601 time (UTC unless it names a zone)."""
    if text.strip().lstrip("-").isdigit():
        return int(text)
    try:
        when = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid time {text!r}: use unix milliseconds or ISO 8601, e.g. 2024-05-01T12:00:00Z") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return int(when.timestamp() * 1000)


def names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


# ---- one vocabulary (herald.cli.vocabulary): -s/--subscription, -n/--count, --position ----

class _EdgeAlias(argparse.Action):
    """`--earliest` / `--latest` of older Herald: a flag storing what `--position earliest|latest`
    stores, after a deprecation warning (vocabulary.deprecated_alias takes a value, these take none)."""

    def __init__(self, option_strings: list[str], dest: str, edge: InitialPosition, **kwargs: Any) -> None:
        super().__init__(option_strings, dest=dest, nargs=0, default=argparse.SUPPRESS, help=argparse.SUPPRESS,
                         **kwargs)
        self._edge = edge

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        warn_deprecated(option_string or self.option_strings[0], f"--position {self._edge.name.lower()}")
        setattr(namespace, self.dest, self._edge)


def add_edge_aliases(group: argparse._ActionsContainer, dest: str) -> None:
    """Accept --earliest and --latest for `--position earliest|latest` (stored in `dest`)."""
    group.add_argument("--earliest", action=_EdgeAlias, dest=dest, edge=InitialPosition.Earliest)
    group.add_argument("--latest", action=_EdgeAlias, dest=dest, edge=InitialPosition.Latest)


def add_subscription_argument(parser: argparse.ArgumentParser, *, legacy_count: bool = False) -> None:
    """-s/--subscription, and the positional subscription (and count) of older Herald, accepted with
    a warning: `subscription_of` and `count_of` sort them out."""
    parser.add_argument("-s", "--subscription", help="the subscription's name")
    parser.add_argument("legacy", nargs="*", metavar="SUBSCRIPTION" + (" [N]" if legacy_count else ""),
                        help="deprecated: the subscription (and count) as positional arguments; use "
                             "-s SUBSCRIPTION" + (" -n N" if legacy_count else ""))


def subscription_of(args: argparse.Namespace) -> str:
    """The subscription given with -s, or (deprecated) as the first positional argument."""
    if args.subscription is not None:
        return str(args.subscription)
    if args.legacy:
        args.subscription = args.legacy.pop(0)
        warn_deprecated("a positional subscription", "-s/--subscription")
        return str(args.subscription)
    raise HeraldUsageError("give the subscription with -s/--subscription")


def count_of(args: argparse.Namespace, default: int | None) -> int | None:
    """The count given with -n, or (deprecated) as the positional argument after the subscription."""
    subscription_of(args)
    if len(args.legacy) > 1:
        raise HeraldUsageError(f"unexpected arguments: {' '.join(args.legacy)}")
    if args.legacy:
        if args.count is not None:
            raise HeraldUsageError("give the count once, with -n/--count")
        warn_deprecated("a positional count", "-n/--count")
        try:
            return positive(args.legacy[0])
        except argparse.ArgumentTypeError as error:
            raise HeraldUsageError(str(error)) from None
    return default if args.count is None else int(args.count)


def no_extra_arguments(args: argparse.Namespace) -> None:
    subscription_of(args)
    if args.legacy:
        raise HeraldUsageError(f"unexpected arguments: {' '.join(args.legacy)}")
