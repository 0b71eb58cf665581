"""Issue 22, item 5: pulsar-admin's topic lookup, expire-messages, get-message-by-id and
examine-message, through `herald admin` (subprocess, exit statuses), the AdminClient and the admin
REST API (Pulsar's paths), with every error path."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from herald.client import Client, InitialPosition
from herald.client.admin import AdminClient
from herald.common.errors import InvalidArgumentError, NotFoundError

from tests.conftest import StandaloneProcess
from tests.e2e.test_admin_cli import AdminCli
from tests.helpers import unique_topic


@pytest.fixture
def cli(shared_standalone: StandaloneProcess) -> AdminCli:
    return AdminCli(shared_standalone.service_url)


def produce_messages(url: str, topic: str) -> list[str]:
    """Three text messages with keys and properties, then one that is not UTF-8; their ids."""
    with Client(url) as client, client.create_producer(topic, batching_enabled=False) as producer:
        ids = [producer.send(f"value {i}".encode(), key=f"key-{i}", properties={"n": str(i)}) for i in range(3)]
        ids.append(producer.send(b"\xff\xfe\x00"))
    return [f"{message_id.ledger_id}:{message_id.entry_id}" for message_id in ids]


def _backlog(cli: AdminCli, topic: str) -> dict[str, int]:
    return {s["name"]: s["msg_backlog"] for s in cli.json("topics", "stats", topic)["subscriptions"]}


def test_lookup_names_the_owner_of_a_topic_and_of_each_partition(cli: AdminCli) -> None:
    topic, parted = unique_topic("lookup"), unique_topic("lookup-parted")
    cli.run("topics", "create", topic)
    cli.run("topics", "create", parted, "--partitions", "3")
    broker = cli.json("brokers", "list")["brokers"][0]["address"]
    assert cli.json("topics", "lookup", topic) == {"topic": topic, "owners": {topic: broker}}
    owners = cli.json("topics", "lookup", parted)["owners"]
    assert owners == {f"{parted}-partition-{i}": broker for i in range(3)}
    table = cli.run("topics", "lookup", parted).stdout.splitlines()
    assert table[0].split() == ["TOPIC", "BROKER"] and table[3].split() == [f"{parted}-partition-2", broker]


def test_get_message_by_id_prints_the_message(cli: AdminCli, shared_standalone: StandaloneProcess) -> None:
    topic = unique_topic("by-id")
    ids = produce_messages(shared_standalone.service_url, topic)
    shown = cli.json("topics", "get-message-by-id", topic, "--id", ids[1])
    assert f"{shown['ledger_id']}:{shown['entry_id']}" == ids[1] and shown["publish_time"] > 0
    (message,) = shown["messages"]
    assert (message["key"], message["properties"], message["value"]) == ("key-1", {"n": "1"}, "value 1")
    text = cli.run("topics", "get-message-by-id", topic, "--id", ids[1]).stdout
    assert f"entry {ids[1]} (producer " in text and "publish time: " in text
    assert "[0] key=key-1: value 1" in text and "property n=1" in text
    binary = cli.run("topics", "get-message-by-id", topic, "--id", ids[3]).stdout
    assert "[0]: base64://4A" in binary  # not UTF-8: shown in base64

    ledger = ids[0].split(":")[0]
    assert cli.error("topics", "get-message-by-id", topic, "--id", f"{ledger}:99") == (
        f"error: NOT_FOUND: topic {topic} has no message {ledger}:99: it was never written or was deleted "
        f"(its first entry is {ids[0]}, its last {ids[3]})")
    assert "invalid position 'x'" in cli.error("topics", "get-message-by-id", topic, "--id", "x", status=2)
    assert "required: --id" in cli.error("topics", "get-message-by-id", topic, status=2)


def test_examine_message_counts_from_either_end(cli: AdminCli, shared_standalone: StandaloneProcess) -> None:
    topic = unique_topic("examine")
    ids = produce_messages(shared_standalone.service_url, topic)

    def examined(*options: str) -> str:
        shown = cli.json("topics", "examine-message", topic, *options)
        return f"{shown['ledger_id']}:{shown['entry_id']}"

    assert examined() == ids[3]  # pulsar-admin's default: the latest message
    assert examined("--position", "earliest") == ids[0]
    assert examined("--position", "earliest", "--offset", "3") == ids[2]
    assert examined("--position", "latest", "--offset", "2") == ids[2]
    assert "[0] key=key-0: value 0" in cli.run("topics", "examine-message", topic, "--position", "earliest").stdout
    assert cli.error("topics", "examine-message", topic, "--offset", "5") == (
        f"error: NOT_FOUND: topic {topic} keeps 4 entries: there is none at offset 5 from the latest")
    assert "invalid position 'middle'" in cli.error("topics", "examine-message", topic, "--position", "middle",
                                                    status=2)
    assert "invalid count '0'" in cli.error("topics", "examine-message", topic, "--offset", "0", status=2)

    parted = unique_topic("examine-parted")
    cli.run("topics", "create", parted, "--partitions", "2")
    assert cli.error("topics", "examine-message", parted) == (
        f"error: INVALID_ARGUMENT: {parted} is a partitioned topic: examine a message in one of its partitions, "
        f"{parted}-partition-0 to {parted}-partition-1")
    assert cli.error("topics", "get-message-by-id", parted, "--id", "1:0").startswith(
        f"error: INVALID_ARGUMENT: {parted} is a partitioned topic: give the message id in one of its partitions")


def test_expire_messages_acknowledges_what_is_older(cli: AdminCli, shared_standalone: StandaloneProcess) -> None:
    topic = unique_topic("expire")
    cli.run("topics", "create", topic)
    for name in ("a", "b", "c"):
        cli.run("subscriptions", "create", topic, "-s", name, "--position", "earliest")
    produce_messages(shared_standalone.service_url, topic)
    assert _backlog(cli, topic) == {"a": 4, "b": 4, "c": 4}

    assert cli.json("topics", "expire-messages", topic, "-s", "a", "--expire-time", "1h") == {
        "topic": topic, "expired": {"a": 0}}  # nothing is an hour old
    assert cli.run("topics", "expire-messages", topic, "-s", "a", "--expire-time", "0").stdout == (
        f"expired 4 messages of subscription a on {topic}\n")
    assert _backlog(cli, topic) == {"a": 0, "b": 4, "c": 4}

    result = cli.run("topics", "expire-messages", topic, "--all-subscriptions", "--expire-time", "0s")
    assert result.stdout == f"expired 8 messages of 3 subscriptions on {topic}\n"
    assert result.stderr.splitlines()[-1] == "subscriptions expired 3/3"  # progress: plain lines, not a tty
    assert _backlog(cli, topic) == {"a": 0, "b": 0, "c": 0}
    quiet = cli.run("--json", "topics", "expire-messages", topic, "--all-subscriptions", "--expire-time", "0")
    assert json.loads(quiet.stdout) == {"topic": topic, "expired": {"a": 0, "b": 0, "c": 0}}
    assert quiet.stderr == ""  # no progress with --json

    assert cli.error("topics", "expire-messages", topic, "-s", "nope", "--expire-time", "0") == (
        f"error: NOT_FOUND: subscription 'nope' does not exist on {topic}")
    for wrong in (["--expire-time", "1h"], ["-s", "a", "--all-subscriptions", "--expire-time", "1h"]):
        assert "give either -s/--subscription or --all-subscriptions (one)" in cli.error(
            "topics", "expire-messages", topic, *wrong, status=2)
    assert "invalid duration 'soon'" in cli.error("topics", "expire-messages", topic, "-s", "a", "--expire-time",
                                                  "soon", status=2)


async def test_the_admin_client_calls(admin: AdminClient, shared_standalone: StandaloneProcess) -> None:
    topic = unique_topic("client")
    ids = produce_messages(shared_standalone.service_url, topic)
    ledger, entry = (int(part) for part in ids[2].split(":"))
    assert (await admin.get_message_by_id(topic, (ledger, entry))).entry_id == entry
    assert (await admin.examine_message(topic, 1, latest=False)).entry_id == int(ids[0].split(":")[1])
    assert list(await admin.lookup_topic(topic)) == [topic]
    await admin.create_subscription(topic, "sub", InitialPosition.Earliest)
    assert await admin.expire_messages(topic, "sub", 3600) == 0
    assert await admin.expire_messages(topic, None, 0) == 4
    with pytest.raises(NotFoundError, match=f"subscription 'gone' does not exist on {topic}"):
        await admin.expire_messages(topic, "gone", 0)
    with pytest.raises(InvalidArgumentError, match="offset must be at least 1"):
        await admin.examine_message(topic, 0)
    with pytest.raises(InvalidArgumentError, match="expire time must be 0 seconds or more"):
        await admin.expire_messages(topic, "sub", -1)


def _request(url: str, method: str = "GET") -> tuple[int, bytes, dict[str, str]]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=30) as reply:
            return int(reply.status), reply.read(), dict(reply.headers)
    except urllib.error.HTTPError as error:
        return int(error.code), error.read(), dict(error.headers)


def test_the_rest_admin_api_paths(cli: AdminCli, shared_standalone: StandaloneProcess) -> None:
    topic = unique_topic("rest")
    ids = produce_messages(shared_standalone.service_url, topic)
    cli.run("subscriptions", "create", topic, "-s", "sub", "--position", "earliest")
    path = f"{shared_standalone.web_url}/admin/v2/{topic.replace('://', '/')}"
    ledger, entry = ids[1].split(":")
    status, body, headers = _request(f"{path}/ledger/{ledger}/entry/{entry}")
    assert (status, body, headers["X-Pulsar-Message-ID"]) == (200, b"value 1", ids[1])
    assert (headers["X-Pulsar-partition-key"], headers["X-Pulsar-PROPERTY-n"]) == ("key-1", "1")
    status, body, headers = _request(f"{path}/examinemessage?initialPosition=earliest&messagePosition=1")
    assert (status, body, headers["X-Pulsar-Message-ID"]) == (200, b"value 0", ids[0])
    assert _request(f"{path}/examinemessage")[2]["X-Pulsar-Message-ID"] == ids[3]
    assert _request(f"{path}/ledger/{ledger}/entry/99")[0] == 404
    assert _request(f"{path}/examinemessage?initialPosition=middle")[0] == 400

    assert _request(f"{path}/subscription/nope/expireMessages/0", "POST")[0] == 404
    assert _request(f"{path}/subscription/sub/expireMessages/3600", "POST")[0] == 204
    assert _backlog(cli, topic) == {"sub": 4}
    assert _request(f"{path}/all_subscription/expireMessages/0", "POST")[0] == 204
    assert _backlog(cli, topic) == {"sub": 0}
