"""`herald admin` as a user (or a script, with --json) runs it: every group against a running
standalone, tables for people, JSON for scripts, one-line errors with exit status 1, usage errors
with exit status 2, and help for everything."""

from __future__ import annotations

import asyncio
import json
import subprocess
from typing import Any

import pytest
from herald.client import Client
from herald.common.codec.entry import EntryMetadata, encode_entry

from tests.conftest import VENV_BIN, StandaloneProcess, service_env
from tests.helpers import unique_name, unique_topic
from tests.wire import WireClient


class AdminCli:
    def __init__(self, url: str) -> None:
        self.url = url
        self.env = service_env()

    def run(self, *args: str, status: int = 0) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([str(VENV_BIN / "herald"), "admin", "--url", self.url, *args],
                                capture_output=True, text=True, env=self.env, timeout=60)
        assert result.returncode == status, (
            f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}")
        return result

    def json(self, *args: str) -> Any:
        return json.loads(self.run("--json", *args).stdout)

    def error(self, *args: str, status: int = 1) -> str:
        """The one line a failed command prints on stderr (nothing on stdout)."""
        result = self.run(*args, status=status)
        assert result.stdout == ""
        lines = result.stderr.strip().splitlines()
        if status == 1:
            assert len(lines) == 1, result.stderr
        return lines[-1]


@pytest.fixture
def cli(shared_standalone: StandaloneProcess) -> AdminCli:
    return AdminCli(shared_standalone.service_url)


def produce(url: str, topic: str, count: int) -> None:
    with Client(url) as client, client.create_producer(topic) as producer:
        for i in range(count):
            producer.send(b"message %d" % i)


def test_help_documents_every_group_and_command(cli: AdminCli) -> None:
    top = cli.run("--help").stdout
    for group in ("tenants", "namespaces", "topics", "subscriptions", "brokers", "dlq", "--url", "--json"):
        assert group in top
    commands = {
        "tenants": ["list", "get", "create", "update", "delete"],
        "namespaces": ["list", "create", "delete", "policies", "set-policy", "clear-policy"],
        "topics": ["list", "create", "delete", "stats", "internal-stats", "unload", "terminate", "partitions",
                   "policies", "set-policy", "clear-policy"],
        "subscriptions": ["list", "create", "delete", "reset", "skip", "peek"],
        "brokers": ["list"],
        "dlq": ["peek", "replay"],
    }
    for group, names in commands.items():
        text = cli.run(group, "--help").stdout
        assert all(f"    {name}" in text for name in names), text
    policy_help = cli.run("namespaces", "set-policy", "--help").stdout
    for flag in ("--retention-time", "--retention-size", "--ttl", "--backlog-quota-size", "--backlog-quota-age",
                 "--backlog-quota-policy", "--max-producers", "--max-consumers", "--max-consumers-per-subscription",
                 "--deduplication", "--encryption-required", "--ensemble", "--write-quorum", "--ack-quorum",
                 "--max-message-size"):
        assert flag in policy_help
    assert "--retention" in cli.run("topics", "clear-policy", "--help").stdout
    assert "get" in cli.run("topics", "partitions", "--help").stdout
    herald_help = subprocess.run([str(VENV_BIN / "herald"), "--help"], capture_output=True, text=True,
                                 env=cli.env, timeout=60).stdout
    assert "admin" in herald_help


def test_tenants(cli: AdminCli) -> None:
    tenant = unique_name("acme")
    assert "admin_roles:      ops, dev" in cli.run("tenants", "create", tenant, "--admin-roles", "ops,dev").stdout
    assert tenant in cli.run("tenants", "list").stdout.splitlines()
    assert tenant in cli.json("tenants", "list")["tenants"]
    cli.run("tenants", "update", tenant, "--allowed-clusters", "standalone")
    assert cli.json("tenants", "get", tenant) == {
        "name": tenant, "admin_roles": ["ops", "dev"], "allowed_clusters": ["standalone"]}
    assert cli.error("tenants", "create", tenant) == f"error: ALREADY_EXISTS: Tenant {tenant} already exists"
    assert cli.run("tenants", "delete", tenant).stdout == f"tenant {tenant} deleted\n"
    assert cli.error("tenants", "get", tenant) == f"error: NOT_FOUND: Tenant {tenant} does not exist"


def test_namespaces_and_their_policies(cli: AdminCli) -> None:
    tenant = unique_name("corp")
    namespace = f"{tenant}/orders"
    cli.run("tenants", "create", tenant)
    created = cli.json("namespaces", "create", namespace, "--retention-time", "7d", "--retention-size", "10G")
    assert created["retention"] == {"time_seconds": 7 * 86400, "size_bytes": 10 * 1024**3}
    assert created["message_ttl_seconds"] is None  # unset: inherited
    assert cli.json("namespaces", "list", tenant) == {"namespaces": [namespace]}

    policies = cli.json("namespaces", "set-policy", namespace, "--ttl", "1h", "--backlog-quota-size", "1G",
                        "--backlog-quota-policy", "producer_exception", "--max-producers", "4", "--max-consumers",
                        "8", "--max-consumers-per-subscription", "2", "--deduplication", "off",
                        "--encryption-required", "on", "--ensemble", "1", "--write-quorum", "1", "--ack-quorum", "1",
                        "--max-message-size", "1M", "--max-topics", "100", "--max-partitions", "500")
    assert policies == {
        "retention": {"time_seconds": 604800, "size_bytes": 10 * 1024**3},
        "message_ttl_seconds": 3600,
        "backlog_quota": {"limit_bytes": 1024**3, "limit_seconds": -1, "policy": "PRODUCER_EXCEPTION"},
        "max_producers_per_topic": 4, "max_consumers_per_topic": 8, "max_consumers_per_subscription": 2,
        "deduplication_enabled": False, "encryption_required": True,
        "persistence": {"ensemble_size": 1, "write_quorum": 1, "ack_quorum": 1},
        "max_message_size": 1024**2, "max_topics": 100, "max_partitions_per_topic": 500,
        "schema_compatibility_strategy": None,  # unset: the broker's default (set through the REST API)
        "schema_validation_enforced": None, "is_allow_auto_update_schema": None, "compaction_threshold": None,
    }
    # Half a group keeps the other half: only the size of the quota changes.
    assert cli.json("namespaces", "set-policy", namespace, "--backlog-quota-size", "2G")["backlog_quota"] == {
        "limit_bytes": 2 * 1024**3, "limit_seconds": -1, "policy": "PRODUCER_EXCEPTION"}
    table = cli.run("namespaces", "policies", namespace).stdout
    assert "message_ttl:                    1h" in table
    assert "backlog_quota:                  size 2G, age unlimited, policy producer_exception" in table
    assert "max_topics:                     100" in table
    assert "max_partitions_per_topic:       500" in table
    cleared = cli.json("namespaces", "clear-policy", namespace, "--ttl", "--backlog-quota")
    assert cleared["message_ttl_seconds"] is None and cleared["backlog_quota"] is None
    assert cleared["max_producers_per_topic"] == 4
    assert "(inherited)" in cli.run("namespaces", "clear-policy", namespace, "--all").stdout
    assert cli.error("namespaces", "set-policy", namespace, "--ensemble", "1", "--write-quorum", "2",
                     "--ack-quorum", "1") == (
        "error: INVALID_ARGUMENT: persistence 1/2/1 is invalid: write quorum 2 > ensemble size 1; "
        "need ensemble size >= write quorum >= ack quorum >= 1")
    assert cli.run("namespaces", "delete", namespace).stdout == f"namespace {namespace} deleted\n"
    assert cli.error("namespaces", "policies", namespace) == f"error: NOT_FOUND: Namespace {namespace} does not exist"
    assert cli.error("namespaces", "list", "nobody") == "error: NOT_FOUND: Tenant nobody does not exist"


def test_usage_errors_exit_with_status_2(cli: AdminCli) -> None:
    assert "invalid duration '7x'" in cli.error("namespaces", "set-policy", "public/default", "--ttl", "7x",
                                                status=2)
    assert "invalid size '10Q'" in cli.error("namespaces", "set-policy", "public/default", "--retention-size",
                                             "10Q", status=2)
    assert "no policy given" in cli.error("namespaces", "set-policy", "public/default", status=2)
    assert "nothing to clear" in cli.error("topics", "clear-policy", "t", status=2)
    assert "give --ensemble, --write-quorum and --ack-quorum together" in cli.error(
        "topics", "set-policy", unique_topic("q"), "--ensemble", "1", status=2)
    assert "one of the arguments" in cli.error("subscriptions", "reset", "t", "s", status=2)
    assert "give a number of entries to skip, or --all" in cli.error("subscriptions", "skip", "t", "s", status=2)
    assert "invalid position 'x'" in cli.error("subscriptions", "create", "t", "s", "--position", "x", status=2)
    assert "required" in cli.error("tenants", status=2)
    bad_url = subprocess.run([str(VENV_BIN / "herald"), "admin", "--url", "nowhere", "tenants", "list"],
                             capture_output=True, text=True, env=cli.env, timeout=60)
    assert bad_url.returncode == 2 and "admin URL 'nowhere' is invalid" in bad_url.stderr


def test_an_unreachable_broker_is_one_error_line(cli: AdminCli) -> None:
    unreachable = AdminCli("127.0.0.1:1")
    line = unreachable.error("--timeout", "5", "tenants", "list")
    assert line.startswith("error: UNAVAILABLE: ListTenants at 127.0.0.1:1: connection failed")


def test_topics(cli: AdminCli, shared_standalone: StandaloneProcess) -> None:
    topic = unique_topic("orders")
    parted = unique_topic("parted")
    assert cli.run("topics", "create", topic).stdout == f"topic {topic} created\n"
    assert cli.json("topics", "create", parted, "--partitions", "2") == {"created": parted, "partitions": 2}
    listed = cli.json("topics", "list", "public/default")["topics"]
    assert topic in listed and parted in listed
    assert cli.json("topics", "partitions", "get", parted) == {"topic": parted, "partitions": 2}
    assert cli.run("topics", "partitions", "update", parted, "3").stdout == f"topic {parted} now has 3 partitions\n"
    assert cli.error("topics", "partitions", "update", parted, "1") == (
        f"error: NOT_ALLOWED: cannot shrink from 3 to 1 partitions: topic {parted} can only grow")

    produce(shared_standalone.service_url, topic, 3)
    stats = cli.json("topics", "stats", topic)
    assert (stats["topic"], stats["msg_in_counter"], stats["entries"], stats["persistent"]) == (topic, 3, 3, True)
    assert isinstance(stats["bytes_in_counter"], int) and stats["partition_stats"] == []
    table = cli.run("topics", "stats", topic).stdout
    assert "msg_in_counter:      3" in table and "subscriptions:\n  (none)" in table
    assert cli.json("topics", "stats", parted)["partitions"] == 3
    internal = cli.json("topics", "internal-stats", topic)
    assert (internal["state"], internal["number_of_entries"]) == ("LedgerOpened", 3)
    assert "LEDGER  ENTRIES  SIZE" in cli.run("topics", "internal-stats", topic).stdout

    assert cli.json("topics", "set-policy", topic, "--ttl", "30m")["message_ttl_seconds"] == 1800
    assert cli.json("topics", "policies", topic)["message_ttl_seconds"] == 1800
    effective = cli.json("topics", "policies", "--effective", topic)
    assert effective["message_ttl_seconds"] == 1800 and effective["persistence"]["ensemble_size"] == 1
    assert cli.json("topics", "clear-policy", topic, "--ttl")["message_ttl_seconds"] is None

    assert cli.run("topics", "unload", topic).stdout == f"topic {topic} unloaded\n"
    terminated = cli.json("topics", "terminate", topic)
    assert terminated["terminated"] == topic and terminated["last"]["entry_id"] == 2
    assert cli.json("topics", "stats", topic)["terminated"] is True
    assert cli.run("topics", "delete", topic, "--force").stdout == f"topic {topic} deleted\n"
    assert topic not in cli.json("topics", "list", "public/default")["topics"]


def test_subscriptions(cli: AdminCli, shared_standalone: StandaloneProcess) -> None:
    topic = unique_topic("subs")
    produce(shared_standalone.service_url, topic, 4)
    cli.run("subscriptions", "create", topic, "-s", "from-start", "--position", "earliest")
    assert cli.run("subscriptions", "create", topic, "-s", "from-now").stdout == (
        f"subscription from-now created on {topic}\n")
    assert cli.json("subscriptions", "list", topic) == {"subscriptions": ["from-now", "from-start"]}
    assert cli.error("subscriptions", "create", topic, "-s", "from-now") == (
        f"error: ALREADY_EXISTS: subscription 'from-now' already exists on {topic}")

    peeked = cli.json("subscriptions", "peek", topic, "-s", "from-start", "-n", "2")["entries"]
    assert [m["value"] for e in peeked for m in e["messages"]] == ["message 0", "message 1"]
    assert peeked[0]["redelivery_count"] == 0 and peeked[0]["messages"][0]["value_base64"] == "bWVzc2FnZSAw"
    ledger_id = peeked[0]["ledger_id"]
    assert ": message 0" in cli.run("subscriptions", "peek", topic, "-s", "from-start").stdout
    assert cli.run("subscriptions", "skip", topic, "-s", "from-start", "-n", "1").stdout == "skipped 1 entries\n"
    assert cli.json("subscriptions", "skip", topic, "-s", "from-start", "--all") == {"skipped": 3}
    assert cli.run("subscriptions", "peek", topic, "-s", "from-start").stdout == "(no unacknowledged messages)\n"

    def backlog() -> int:
        stats = cli.json("topics", "stats", topic)
        return {s["name"]: s["backlog_entries"] for s in stats["subscriptions"]}["from-start"]

    cli.run("subscriptions", "reset", topic, "-s", "from-start", "--position", "earliest")
    assert backlog() == 4
    cli.run("subscriptions", "reset", topic, "-s", "from-start", "--position", f"{ledger_id}:3")
    assert backlog() == 1
    cli.run("subscriptions", "reset", topic, "-s", "from-start", "--time", "2000-01-01T00:00:00Z")
    assert backlog() == 4
    assert "reset to the latest message" in cli.run(
        "subscriptions", "reset", topic, "-s", "from-start", "--position", "latest").stdout
    assert backlog() == 0

    assert cli.error("subscriptions", "skip", topic, "-s", "missing", "-n", "1") == (
        f"error: NOT_FOUND: subscription 'missing' does not exist on {topic}")
    cli.run("subscriptions", "delete", topic, "-s", "from-now")
    assert cli.json("subscriptions", "delete", topic, "-s", "from-start", "--force") == {
        "deleted": "from-start", "topic": topic}
    assert cli.json("subscriptions", "list", topic) == {"subscriptions": []}


def test_peek_shows_an_entry_it_cannot_decode(cli: AdminCli, shared_standalone: StandaloneProcess) -> None:
    topic = unique_topic("garbled")

    async def send_garbled_entry() -> None:
        async with WireClient(shared_standalone.port) as wire:
            producer = await wire.producer(topic)
            metadata = EntryMetadata(producer_name=producer.name, sequence_id=1, highest_sequence_id=1,
                                     num_messages=1, batched=True)
            # As long as a record header, as the broker wants for one message, but no record.
            reply = await producer.send_entry(encode_entry(metadata, b"\xff" * 5), 1)
            assert reply.HasField("receipt"), reply

    asyncio.run(send_garbled_entry())
    cli.run("subscriptions", "create", topic, "s", "--position", "earliest")
    [entry] = cli.json("subscriptions", "peek", topic, "s")["entries"]
    assert entry["messages"] == [] and entry["data_base64"]
    assert entry["undecodable"].startswith("malformed batch payload")
    assert "cannot decode it (malformed batch payload" in cli.run("subscriptions", "peek", topic, "s").stdout


def test_brokers(cli: AdminCli, shared_standalone: StandaloneProcess) -> None:
    address = f"127.0.0.1:{shared_standalone.broker_port}"
    [broker] = cli.json("brokers", "list")["brokers"]
    assert (broker["broker_id"], broker["address"], broker["cluster"]) == ("standalone", address, "standalone")
    assert set(broker["load"]) == {"topics", "producers", "consumers", "msg_rate_in", "msg_rate_out"}
    lines = cli.run("brokers", "list").stdout.splitlines()
    assert lines[0].split() == ["BROKER", "ADDRESS", "CLUSTER", "TOPICS", "PRODUCERS", "CONSUMERS", "MSG/S", "IN",
                                "MSG/S", "OUT"]
    assert lines[1].split()[:3] == ["standalone", address, "standalone"]
    # A broker's own address works as the URL too.
    assert AdminCli(address).json("brokers", "list")["brokers"][0]["address"] == address
