"""The `herald` command: run a service (standalone, lookup, broker, storage, proxy, dlq-worker, operator,
local-cluster) or use one (produce, consume, admin, perf). This module holds the top-level parser and how
every command runs (logging, tracing, exit statuses); each command family adds its own subcommands."""

from __future__ import annotations

import argparse
import contextlib
import sys

from herald.cli.admin.command import add_admin_parser
from herald.cli.perf import add_perf_commands
from herald.cli.produce_consume import add_produce_consume_commands
from herald.cli.services import add_service_commands
from herald.common import tracing
from herald.common.errors import HeraldError
from herald.common.logs import configure_logging


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="herald", description="Herald: durable publish/subscribe messaging")
    parser.add_argument("--log-level", default=None, help="DEBUG, INFO (default), WARNING, ERROR")
    parser.add_argument("--log-format", default=None, choices=["text", "json"],
                        help="text (default) or json: one JSON object per line (env HERALD_LOG_FORMAT)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_service_commands(commands)
    add_produce_consume_commands(commands)
    add_admin_parser(commands)
    add_perf_commands(commands)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        configure_logging(args.log_level, args.log_format)
        # HERALD_TRACING_* (or the --config file's [tracing] table): off unless an exporter is named.
        tracing.configure(f"herald-{args.command}", getattr(args, "config", None))
        args.func(args)
    except HeraldError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        with contextlib.suppress(Exception):
            print("interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    finally:
        tracing.shutdown()  # exports the spans still queued


if __name__ == "__main__":
    main()
