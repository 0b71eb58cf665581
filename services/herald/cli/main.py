# PYTHON_ARGCOMPLETE_OK  (argcomplete's marker: the `herald` entry point completes itself)
"""The `herald` command: run a service (standalone, lookup, broker, storage, proxy, dlq-worker, operator,
local-cluster) or use one (produce, consume, admin, perf, context). This module holds the top-level parser
and how every command runs (logging, tracing, contexts, shell completion, exit statuses: 0 ok, 1 the
operation failed, 2 usage); each command family adds its own subcommands."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any

from herald.cli import vocabulary
from herald.cli.admin.command import add_admin_parser
from herald.cli.client_options import apply_client_options, choose_context
from herald.cli.context import add_context_commands
from herald.cli.perf import add_perf_commands
from herald.cli.produce_consume import add_produce_consume_commands
from herald.cli.services import add_service_commands
from herald.cli.vocabulary import EXIT_FAILED, EXIT_USAGE
from herald.common import tracing
from herald.common.errors import HeraldError, InvalidArgumentError
from herald.common.logs import configure_logging, logs_as_json

SHELLS = ("bash", "zsh", "fish")


def version() -> str:
    """The installed distribution's version, else the package's (run from a source tree)."""
    from importlib import metadata

    try:
        return metadata.version("herald")
    except metadata.PackageNotFoundError:
        import herald

        return herald.__version__


class _VersionAction(argparse.Action):
    """--version, computed only when asked (argparse's own wants the text while the parser is built)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(f"herald {version()}", flush=True)
        parser.exit()


def cmd_completion(args: argparse.Namespace) -> None:
    from argcomplete.shell_integration import shellcode

    print(shellcode(["herald"], shell=args.shell), end="", flush=True)


def add_completion_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    setup = ("bash: eval \"$(herald completion bash)\" in ~/.bashrc; zsh: eval \"$(herald completion zsh)\" "
             "in ~/.zshrc; fish: herald completion fish > ~/.config/fish/completions/herald.fish")
    sub = commands.add_parser("completion", help="print the shell completion script (bash, zsh or fish)",
                              description=f"Print the script that makes the shell complete herald's commands "
                                          f"and flags. {setup}")
    sub.add_argument("shell", choices=SHELLS, help="the shell to complete in: bash, zsh or fish")
    sub.set_defaults(func=cmd_completion)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="herald", description="Herald: durable publish/subscribe messaging",
        epilog="exit status: 0 ok, 1 the operation failed (not found, refused, unreachable, timed out), "
               "2 usage error. See docs/cli.md.")
    parser.add_argument("--version", action=_VersionAction, help="print herald's version and exit")
    parser.add_argument("--log-level", default=None, help="DEBUG, INFO (default), WARNING, ERROR")
    parser.add_argument("--log-format", default=None, choices=["text", "json"],
                        help="text (default) or json: one JSON object per line (env HERALD_LOG_FORMAT)")
    parser.add_argument("--context", metavar="NAME", default=None,
                        help="take the service URL and credentials from this context (herald context; "
                             "default: $HERALD_CONTEXT, else the selected one)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_service_commands(commands)
    add_produce_consume_commands(commands)
    add_admin_parser(commands)
    add_perf_commands(commands)
    add_context_commands(commands)
    add_completion_command(commands)
    return parser


def _asks_for_json_logs(argv: list[str] | None) -> bool:
    """--log-format json (or HERALD_LOG_FORMAT=json), read before the whole command line is."""
    words = sys.argv[1:] if argv is None else argv
    chosen = os.environ.get("HERALD_LOG_FORMAT") or ""
    for i, word in enumerate(words):  # a plain scan: a parser here would report usage errors twice
        if word == "--log-format" and i + 1 < len(words):
            chosen = words[i + 1]
        elif word.startswith("--log-format="):
            chosen = word.split("=", 1)[1]
    return chosen.lower() == "json"


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    if argv is None:  # shell completion: answers and exits when the shell asks ($_ARGCOMPLETE), else nothing
        import argcomplete

        argcomplete.autocomplete(parser)
    if _asks_for_json_logs(argv):
        vocabulary.hold_warnings()  # deprecation warnings given while parsing wait for the JSON log handler
    try:
        args = parser.parse_args(argv)  # a usage error exits with status 2 (argparse's)
    except SystemExit:
        vocabulary.release_warnings(json_lines=False)
        raise
    try:
        try:
            configure_logging(args.log_level, args.log_format)
        finally:
            vocabulary.release_warnings(json_lines=logs_as_json())
        choose_context(args.context)
        apply_client_options(args)  # flag > HERALD_* > context > default, for commands with a client
        # HERALD_TRACING_* (or the --config file's [tracing] table): off unless an exporter is named.
        tracing.configure(f"herald-{args.command}", getattr(args, "config", None))
        args.func(args)
    except InvalidArgumentError as error:  # a value the command checks after parsing: usage, as argparse's
        print(f"error: {error}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_USAGE) from None
    except HeraldError as error:  # the operation failed (not found, refused, unreachable, timed out)
        print(f"error: {error}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_FAILED) from None
    except KeyboardInterrupt:
        with contextlib.suppress(Exception):
            print("interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    finally:
        tracing.shutdown()  # exports the spans still queued


if __name__ == "__main__":
    main()
