"""The `herald` command's parser, without a server: every admin command takes the common options
(--url, --json, --timeout, --auth-token-file, --tls-*) from the one shared definition, given after
`admin` or after the command; every parser's help formats; and the CLI's modules stay small."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import herald.cli
import pytest
from herald.cli.client_options import apply_client_options
from herald.cli.main import build_parser


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[
        tuple[tuple[str, ...], argparse.ArgumentParser]]:
    yield path, parser
    for name, sub in _subcommands(parser).items():
        yield from _parsers(sub, (*path, name))


def _value(action: argparse.Action) -> str:
    """A value the action's type takes (a count, a LEDGER:ENTRY position, a name)."""
    if action.choices:
        return str(next(iter(action.choices)))
    if action.type is None:
        return "1"
    for candidate in ("1", "1:2"):
        try:
            action.type(candidate)  # type: ignore[operator]
        except (argparse.ArgumentTypeError, ValueError):
            continue
        return candidate
    raise AssertionError(f"no test value for {action}")


def _required(parser: argparse.ArgumentParser) -> list[str]:
    """The fewest arguments the command parses with: its positionals, required options, and the
    first option of each required group of alternatives."""
    argv: list[str] = []
    for action in parser._actions:
        if not action.option_strings and action.nargs not in ("?", "*"):
            argv.append(_value(action))
        elif action.option_strings and action.required:
            argv += [action.option_strings[0], _value(action)]
    for group in parser._mutually_exclusive_groups:
        if group.required:
            first = group._group_actions[0]
            argv += [first.option_strings[0]] + ([] if first.nargs == 0 else [_value(first)])
    return argv


def _admin_commands() -> list[tuple[tuple[str, ...], list[str]]]:
    admin = _subcommands(build_parser())["admin"]
    return [(path, _required(parser)) for path, parser in _parsers(admin) if not _subcommands(parser) and path]


ADMIN_COMMANDS = _admin_commands()


def test_the_walk_finds_every_admin_command() -> None:
    found = {" ".join(path) for path, _ in ADMIN_COMMANDS}
    assert {"tenants list", "topics partitions update", "subscriptions reset", "tokens create", "brokers list",
            "dlq replay", "namespaces grant-permission", "topics permissions"} <= found


@pytest.mark.parametrize(("path", "required"), ADMIN_COMMANDS, ids=[" ".join(p) for p, _ in ADMIN_COMMANDS])
def test_every_admin_command_takes_the_common_options_after_admin_or_after_itself(
        path: tuple[str, ...], required: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HERALD_SERVICE_URL", "herald://from-env:1")
    monkeypatch.setenv("HERALD_TLS_TRUST_CERTS_FILE", "/env/ca.pem")
    monkeypatch.delenv("HERALD_AUTH_TOKEN_FILE", raising=False)
    monkeypatch.delenv("HERALD_CONTEXT", raising=False)
    monkeypatch.setenv("HERALD_CONFIG_DIR", str(tmp_path))  # no context
    parser = build_parser()

    defaults = parser.parse_args(["admin", *path, *required])
    apply_client_options(defaults)  # as main() does: flag > HERALD_* > context > default
    assert (defaults.url, defaults.json, defaults.timeout) == ("herald://from-env:1", False, 30.0)
    assert (defaults.tls_trust_certs_file, defaults.auth_token_file) == ("/env/ca.pem", None)
    assert callable(defaults.admin_handler) and defaults.func.__name__ == "run_admin"

    before = parser.parse_args(["admin", "--url", "herald://before:1", "--json", "--timeout", "5",
                                "--auth-token-file", "/before/token", *path, *required])
    assert (before.url, before.json, before.timeout, before.auth_token_file) == (
        "herald://before:1", True, 5.0, "/before/token")

    # Given after the command, an option wins over the same one given after `admin`, and hides no other.
    after = parser.parse_args(["admin", "--url", "herald://before:1", "--auth-token-file", "/before/token", *path,
                               *required, "--url", "herald://after:2", "--tls-cert-file", "/after/cert.pem", "--json"])
    assert (after.url, after.auth_token_file, after.tls_cert_file, after.json, after.timeout) == (
        "herald://after:2", "/before/token", "/after/cert.pem", True, 30.0)


def test_every_parser_formats_its_help() -> None:
    """`herald --help` and every `herald <command> ... --help`: argparse formats help only when asked,
    so a help text it cannot format would fail only there."""
    for path, parser in _parsers(build_parser()):
        text = parser.format_help()
        assert text.startswith("usage: herald"), path
        if path[:1] == ("admin",) and not _subcommands(parser):
            assert all(option in text for option in ("--url", "--json", "--timeout", "--auth-token-file",
                                                     "--tls-trust-certs-file", "--tls-cert-file", "--tls-key-file"))


def test_no_cli_module_is_longer_than_600_lines() -> None:
    """A module past ~600 lines is usually two concepts (STYLE.md): the admin command is split by
    resource, with its arguments and its rendering apart."""
    root = Path(herald.cli.__file__).parent
    sizes = {str(path.relative_to(root)): len(path.read_text().splitlines()) for path in root.rglob("*.py")}
    assert not {name: lines for name, lines in sizes.items() if lines > 600}, sizes
