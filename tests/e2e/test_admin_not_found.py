"""Issue 22, item 1: admin reads of topics, subscriptions and namespaces that do not exist answer
NOT_FOUND and create nothing, through the CLI (exit status 1, one line naming what is missing),
the Python AdminClient (NotFoundError) and the admin REST API (404); a subscription missing on a
partitioned topic is named with the topic the caller gave, never one of its partitions. And the
README's admin block runs as written."""

from __future__ import annotations

import re
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from herald.client import InitialPosition
from herald.client.admin import AdminClient
from herald.common.errors import NotFoundError

from tests.conftest import VENV_BIN, StandaloneProcess
from tests.e2e.test_admin_cli import AdminCli, produce
from tests.helpers import unique_name, unique_topic

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cli(shared_standalone: StandaloneProcess) -> AdminCli:
    return AdminCli(shared_standalone.service_url)


def _listed(cli: AdminCli, namespace: str = "public/default") -> list[str]:
    return list(cli.json("topics", "list", namespace)["topics"])


def test_cli_reads_of_a_missing_topic_answer_not_found_and_create_nothing(cli: AdminCli) -> None:
    topic = unique_topic("typo")
    missing = f"error: NOT_FOUND: topic {topic} does not exist: check its name, or create it first"
    for command, options in ((["topics", "stats"], []), (["topics", "internal-stats"], []),
                             (["topics", "policies"], []), (["topics", "policies"], ["--effective"]),
                             (["topics", "partitions", "get"], []), (["topics", "lookup"], []),
                             (["topics", "compaction-status"], []), (["subscriptions", "list"], []),
                             (["subscriptions", "peek"], ["-s", "sub"]),
                             (["subscriptions", "skip"], ["-s", "sub", "-n", "1"]),
                             (["subscriptions", "reset"], ["-s", "sub", "--position", "earliest"]),
                             (["topics", "expire-messages"], ["-s", "sub", "--expire-time", "1h"]),
                             (["topics", "get-message-by-id"], ["--id", "1:0"]), (["topics", "examine-message"], []),
                             (["schemas", "get"], []), (["schemas", "versions"], [])):
        assert cli.error(*command, topic, *options) == missing, command
        assert cli.error("--json", *command, topic, *options) == missing, command
    assert topic not in _listed(cli)
    # Asked again: still missing (the first calls created nothing behind the listing's back).
    assert cli.error("topics", "stats", topic) == missing


def test_cli_reads_in_a_missing_namespace_or_tenant_answer_not_found(cli: AdminCli) -> None:
    namespace = f"public/{unique_name('nons')}"
    tenant = unique_name("notenant")
    assert cli.error("topics", "stats", f"persistent://{namespace}/x") == (
        f"error: NOT_FOUND: Namespace {namespace} does not exist")
    assert cli.error("namespaces", "policies", namespace) == f"error: NOT_FOUND: Namespace {namespace} does not exist"
    assert cli.error("topics", "list", namespace) == f"error: NOT_FOUND: Namespace {namespace} does not exist"
    assert cli.error("subscriptions", "list", f"persistent://{tenant}/ns/x") == (
        f"error: NOT_FOUND: Tenant {tenant} does not exist")
    assert namespace not in cli.json("namespaces", "list", "public")["namespaces"]


def test_policies_set_ahead_of_a_topic_are_read_back_without_making_it(cli: AdminCli) -> None:
    topic = unique_topic("ahead")
    assert cli.json("topics", "set-policy", topic, "--ttl", "1h")["message_ttl_seconds"] == 3600
    assert cli.json("topics", "policies", topic)["message_ttl_seconds"] == 3600
    assert topic not in _listed(cli)
    assert cli.error("topics", "stats", topic).startswith(f"error: NOT_FOUND: topic {topic} does not exist")


def test_a_missing_subscription_of_a_partitioned_topic_is_named_with_the_topic(cli: AdminCli) -> None:
    topic = unique_topic("parted")
    cli.run("topics", "create", topic, "--partitions", "3")
    missing = f"error: NOT_FOUND: subscription 'billing' does not exist on {topic}"
    for command in (["subscriptions", "reset", topic, "-s", "billing", "--position", "earliest"],
                    ["subscriptions", "skip", topic, "-s", "billing", "--all"],
                    ["subscriptions", "peek", topic, "-s", "billing"],
                    ["subscriptions", "delete", topic, "-s", "billing"],
                    ["topics", "expire-messages", topic, "-s", "billing", "--expire-time", "0"]):
        line = cli.error(*command)
        assert line == missing, command
        assert "-partition-" not in line
    assert cli.json("subscriptions", "list", topic) == {"subscriptions": []}


def test_existing_topics_still_answer_reads(cli: AdminCli, shared_standalone: StandaloneProcess) -> None:
    """The check refuses what is missing only: a created topic, a partitioned topic, each of its
    partitions (made on first use) and a topic its first producer made all answer."""
    created, parted, produced = unique_topic("made"), unique_topic("parted"), unique_topic("produced")
    cli.run("topics", "create", created)
    cli.run("topics", "create", parted, "--partitions", "2")
    produce(shared_standalone.service_url, produced, 1)
    assert cli.json("topics", "stats", created)["entries"] == 0
    assert cli.json("topics", "stats", parted)["partitions"] == 2
    assert cli.json("topics", "stats", f"{parted}-partition-1")["entries"] == 0
    assert cli.json("topics", "partitions", "get", parted)["partitions"] == 2
    assert cli.json("topics", "partitions", "get", produced)["partitions"] == 0
    assert cli.json("subscriptions", "list", produced) == {"subscriptions": []}
    assert cli.error("topics", "stats", f"{parted}-partition-2") == (
        f"error: NOT_FOUND: Topic {parted}-partition-2 does not exist: {parted} has 2 partitions (0 to 1)")


async def test_the_admin_client_raises_not_found_and_creates_nothing(admin: AdminClient) -> None:
    topic = unique_topic("typo-api")
    missing = re.escape(f"topic {topic} does not exist")
    for call in (admin.topic_stats(topic), admin.internal_stats(topic), admin.topic_policies(topic),
                 admin.effective_policies(topic), admin.list_subscriptions(topic),
                 admin.peek_messages(topic, "sub"), admin.skip_messages(topic, "sub", 1),
                 admin.reset_cursor(topic, "sub", edge=InitialPosition.Earliest),
                 admin.get_partitions(topic, must_exist=True), admin.lookup_topic(topic),
                 admin.expire_messages(topic, "sub", 0), admin.get_message_by_id(topic, (0, 0)),
                 admin.examine_message(topic), admin.compaction_status(topic)):
        with pytest.raises(NotFoundError, match=missing):
            await call
    assert await admin.get_partitions(topic) == 0  # as before: not partitioned, nothing asked of existence
    assert topic not in await admin.list_topics("public/default")


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def test_the_rest_admin_api_answers_404_and_creates_nothing(
        cli: AdminCli, shared_standalone: StandaloneProcess) -> None:
    topic = unique_topic("typo-rest")
    path = f"{shared_standalone.web_url}/admin/v2/{topic.replace('://', '/')}"
    for suffix in ("/stats", "/internalStats", "/subscriptions", "/examinemessage", "/ledger/1/entry/0"):
        assert _get(path + suffix) == 404, suffix
    assert topic not in _listed(cli)


def _readme_admin_block() -> list[list[str]]:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Administration"):]
    block = section[section.index("```sh") + len("```sh"):section.index("```", section.index("```sh") + 5)]
    return [line.split()[1:] for line in block.strip().splitlines()]


def test_the_readme_admin_block_runs_as_written(shared_standalone: StandaloneProcess) -> None:
    commands = _readme_admin_block()
    assert commands and all(command[0] == "admin" for command in commands)
    for command in commands:
        result = subprocess.run([str(VENV_BIN / "herald"), "admin", "--url", shared_standalone.service_url,
                                 *command[1:]], capture_output=True, text=True, env=AdminCli("").env, timeout=60)
        assert result.returncode == 0, f"{' '.join(command)}:\n{result.stderr}"
        assert "deprecated" not in result.stderr, result.stderr
