"""Issue 22, item 3 for `herald admin`: one vocabulary (-s/--subscription, -n/--count,
--position earliest|latest|LEDGER:ENTRY), the older spellings (positional subscription and count,
--earliest, --latest) still accepted with a warning on stderr, usage errors with exit status 2, and
help text on every argument of every admin command."""

from __future__ import annotations

import argparse

import pytest
from herald.cli.admin.command import add_admin_parser

from tests.conftest import StandaloneProcess
from tests.e2e.test_admin_cli import AdminCli, produce
from tests.helpers import unique_topic

POSITIONAL_SUBSCRIPTION = "herald: warning: a positional subscription is deprecated; use -s/--subscription"
POSITIONAL_COUNT = "herald: warning: a positional count is deprecated; use -n/--count"


@pytest.fixture
def cli(shared_standalone: StandaloneProcess) -> AdminCli:
    return AdminCli(shared_standalone.service_url)


def _backlog(cli: AdminCli, topic: str) -> int:
    return int(cli.json("topics", "stats", topic)["subscriptions"][0]["backlog_entries"])


def test_the_older_spellings_still_work_with_a_warning(cli: AdminCli, shared_standalone: StandaloneProcess) -> None:
    topic = unique_topic("legacy")
    produce(shared_standalone.service_url, topic, 3)
    created = cli.run("subscriptions", "create", topic, "old", "--position", "earliest")
    assert created.stdout == f"subscription old created on {topic}\n"
    assert created.stderr == POSITIONAL_SUBSCRIPTION + "\n"
    peeked = cli.run("--json", "subscriptions", "peek", topic, "old", "2")
    assert peeked.stderr.splitlines() == [POSITIONAL_SUBSCRIPTION, POSITIONAL_COUNT]
    skipped = cli.run("subscriptions", "skip", topic, "old", "1")
    assert skipped.stdout == "skipped 1 entries\n" and POSITIONAL_COUNT in skipped.stderr
    assert _backlog(cli, topic) == 2
    earliest = cli.run("subscriptions", "reset", topic, "-s", "old", "--earliest")
    assert earliest.stderr == "herald: warning: --earliest is deprecated; use --position earliest\n"
    assert _backlog(cli, topic) == 3
    latest = cli.run("subscriptions", "reset", topic, "old", "--latest")
    assert "herald: warning: --latest is deprecated; use --position latest" in latest.stderr
    assert _backlog(cli, topic) == 0
    # The new spellings warn about nothing.
    quiet = cli.run("subscriptions", "reset", topic, "-s", "old", "--position", "earliest")
    assert quiet.stderr == "" and _backlog(cli, topic) == 3
    assert cli.run("subscriptions", "skip", topic, "--subscription", "old", "--count", "3").stderr == ""


def test_usage_mistakes_exit_with_status_2(cli: AdminCli) -> None:
    topic = unique_topic("usage")
    assert cli.error("subscriptions", "peek", topic, status=2) == (
        "herald admin: error: give the subscription with -s/--subscription")
    # Positional arguments after -s are not taken (argparse reads positionals in one run): refused.
    assert "unrecognized arguments: b" in cli.error("subscriptions", "create", topic, "-s", "a", "b", status=2)
    assert cli.error("subscriptions", "peek", topic, "a", "1", "2", status=2) == (
        "herald admin: error: unexpected arguments: 1 2")
    assert cli.error("subscriptions", "peek", topic, "a", "3", "-n", "2", status=2) == (
        "herald admin: error: give the count once, with -n/--count")
    assert cli.error("subscriptions", "peek", topic, "a", "x", status=2) == (
        "herald admin: error: invalid count 'x': use a whole number, 0 or more")
    assert "invalid count '0'" in cli.error("subscriptions", "peek", topic, "-s", "a", "-n", "0", status=2)
    assert "not allowed with argument" in cli.error(
        "subscriptions", "reset", topic, "-s", "a", "--position", "earliest", "--time", "0", status=2)
    assert "not allowed with argument" in cli.error(
        "subscriptions", "reset", topic, "-s", "a", "--latest", "--time", "0", status=2)
    assert "invalid position 'soon'" in cli.error(
        "subscriptions", "reset", topic, "-s", "a", "--position", "soon", status=2)


def _parsers(parser: argparse.ArgumentParser, path: str) -> list[tuple[str, argparse.ArgumentParser]]:
    found = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found.extend(_parsers(child, f"{path} {name}"))
    return found


def test_every_admin_argument_has_help() -> None:
    top = argparse.ArgumentParser(prog="herald")
    add_admin_parser(top.add_subparsers())
    parsers = _parsers(top, "herald")
    assert len(parsers) > 60  # every group and command was walked
    missing = [f"{path}: {action.option_strings or action.dest}" for path, parser in parsers
               for action in parser._actions
               if not isinstance(action, argparse._SubParsersAction) and not action.help]
    assert missing == []
