"""One spelling for each thing the `herald` commands name, shared by every command family.

- the service address: `--url` (like pulsar-client; `--service-url` and `--admin-url` still work, with a
  deprecation warning);
- a subscription: `-s/--subscription`;
- a count: `-n/--count`;
- where to start: `--position earliest|latest|LEDGER:ENTRY` (or `--time`);
- a subscription type: Exclusive, Shared, Failover, Key_Shared (Pulsar's and the CRD's spelling).

Old spellings are accepted through `deprecated_alias`, which warns once on stderr and stores into the
new option's destination, so scripts written against an older Herald keep working."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any

from herald.client.config import ConsumerType

# Exit statuses of every `herald` command (documented in docs/cli.md).
EXIT_OK = 0
EXIT_FAILED = 1  # the operation failed: not found, refused, unreachable, timed out
EXIT_USAGE = 2  # the command line was wrong (argparse's own status)

# Pulsar's spelling of each subscription type, as the CRD and pulsar-client write them.
SUBSCRIPTION_TYPES = {"Exclusive": ConsumerType.Exclusive, "Shared": ConsumerType.Shared,
                      "Failover": ConsumerType.Failover, "Key_Shared": ConsumerType.KeyShared}
# Older or looser spellings, accepted with a warning.
_TYPE_ALIASES = {"KeyShared": "Key_Shared", "key-shared": "Key_Shared"}


# Warnings given while the command line is parsed wait here until main() has set the log format, so
# that with --log-format json they too are JSON lines. None: they are written at once.
_held: list[str] | None = None
_as_json = False
log = logging.getLogger("herald.cli")


def hold_warnings() -> None:
    """Keep deprecation warnings until release_warnings() (main() calls it before parsing)."""
    global _held
    _held = []


def release_warnings(*, json_lines: bool) -> None:
    """Write the warnings held while parsing, and any later ones at once: as log records when the
    command logs JSON lines, else as `herald: warning: ...` lines."""
    global _held, _as_json
    held, _held, _as_json = _held or [], None, json_lines
    for message in held:
        _write(message)


def _write(message: str) -> None:
    if _as_json:
        log.warning(message)
    else:
        print(f"herald: warning: {message}", file=sys.stderr, flush=True)


def warn_deprecated(old: str, new: str) -> None:
    message = f"{old} is deprecated; use {new}"
    if _held is not None:
        _held.append(message)
    else:
        _write(message)


def subscription_type(text: str) -> ConsumerType:
    """Exclusive, Shared, Failover or Key_Shared (any case); KeyShared still works, with a warning."""
    for name, kind in SUBSCRIPTION_TYPES.items():
        if text.lower() == name.lower():
            return kind
    for alias, name in _TYPE_ALIASES.items():
        if text.lower() == alias.lower():
            warn_deprecated(text, name)
            return SUBSCRIPTION_TYPES[name]
    raise argparse.ArgumentTypeError(
        f"invalid subscription type {text!r}: use one of {', '.join(SUBSCRIPTION_TYPES)}")


class _DeprecatedAlias(argparse.Action):
    """Stores like the option it stands for, after a warning naming the new spelling."""

    def __init__(self, option_strings: Sequence[str], dest: str, new: str, target: argparse.Action,
                 **kwargs: Any) -> None:
        super().__init__(option_strings, dest=target.dest, nargs=target.nargs,
                         default=argparse.SUPPRESS, metavar=target.metavar,
                         help=f"deprecated spelling of {new}", **kwargs)
        self.type = target.type  # so the old spelling's value is converted as the new one's is
        self._new = new
        self._target = target

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        warn_deprecated(option_string or self.option_strings[0], self._new)
        self._target(parser, namespace, values, self._new)


def deprecated_alias(parser: argparse.ArgumentParser | argparse._ArgumentGroup, old: str,
                     target: argparse.Action) -> None:
    """Accept `old` as a spelling of the option `target` (what add_argument returned), with a
    warning. The alias is hidden from --help so that help shows one spelling."""
    action = parser.add_argument(old, action=_DeprecatedAlias, new=target.option_strings[-1], target=target)
    action.help = argparse.SUPPRESS
