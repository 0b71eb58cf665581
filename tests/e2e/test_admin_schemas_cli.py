"""`herald admin schemas` (get, versions, upload, delete, test, compatibility) and `topics delete
--keep-schema` against a running standalone: tables for people, --json for scripts, one-line errors
(exit 1) for refused calls and usage errors (exit 2) for bad files and definitions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import StandaloneProcess
from tests.e2e.test_admin_cli import AdminCli
from tests.helpers import unique_name, unique_topic

ORDER_V0 = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]})
ORDER_TEXT_ID = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]})


@pytest.fixture
def cli(shared_standalone: StandaloneProcess) -> AdminCli:
    return AdminCli(shared_standalone.service_url)


def test_help_lists_the_schema_commands(cli: AdminCli) -> None:
    assert "schemas" in cli.run("--help").stdout
    text = cli.run("schemas", "--help").stdout
    assert all(f"    {name}" in text for name in ("get", "versions", "upload", "delete", "test", "compatibility"))
    assert "--keep-schema" in cli.run("topics", "delete", "--help").stdout


def test_upload_get_versions_and_delete(cli: AdminCli) -> None:
    topic = unique_topic("cli-schema")
    cli.run("topics", "create", topic)
    uploaded = cli.json("schemas", "upload", topic, "--type", "avro", "--definition", ORDER_V0)
    assert uploaded == {"topic": topic, "version": 0, "type": "AVRO"}
    got = cli.json("schemas", "get", topic)
    assert (got["version"], got["type"], json.loads(got["definition"])) == (0, "AVRO", json.loads(ORDER_V0))
    assert cli.json("schemas", "get", topic, "--version", "0")["version"] == 0
    text = cli.run("schemas", "get", topic).stdout
    assert "type:" in text and "AVRO" in text and '"Order"' in text
    versions = cli.json("schemas", "versions", topic)["versions"]
    assert [(each["version"], each["type"]) for each in versions] == [(0, "AVRO")]
    assert "AVRO" in cli.run("schemas", "versions", topic).stdout
    assert cli.json("schemas", "delete", topic) == {"topic": topic, "deleted_version": 0}
    assert cli.error("schemas", "get", topic).startswith("error: NOT_FOUND: ")
    assert "it had no schema" in cli.run("schemas", "delete", topic).stdout


def test_upload_from_a_file_with_properties(cli: AdminCli, tmp_path: Path) -> None:
    topic = unique_topic("cli-schema-file")
    cli.run("topics", "create", topic)
    definition = tmp_path / "order.avsc"
    definition.write_text(ORDER_V0)
    out = cli.run("schemas", "upload", topic, "--type", "AVRO", "--file", str(definition),
                  "--property", "owner=billing", "--property", "team=core").stdout
    assert out == f"topic {topic}: AVRO schema is version 0\n"
    assert cli.json("schemas", "get", topic)["properties"] == {"owner": "billing", "team": "core"}


def test_errors_unknown_namespace_no_schema_bad_file_bad_definition(cli: AdminCli, tmp_path: Path) -> None:
    missing_tenant = f"persistent://{unique_name('nobody')}/ns/t"
    assert cli.error("schemas", "get", missing_tenant).startswith("error: NOT_FOUND: ")
    assert cli.error("schemas", "upload", missing_tenant, "--type", "AVRO", "--definition", ORDER_V0) \
        .startswith("error: NOT_FOUND: ")
    topic = unique_topic("cli-schema-errors")
    cli.run("topics", "create", topic)
    assert cli.error("schemas", "get", topic).startswith("error: NOT_FOUND: ")
    missing = tmp_path / "nope.avsc"
    assert f"cannot read schema file {missing}" in cli.error(
        "schemas", "upload", topic, "--type", "AVRO", "--file", str(missing), status=2)
    assert "the AVRO definition in --definition is not JSON" in cli.error(
        "schemas", "upload", topic, "--type", "AVRO", "--definition", "{not json", status=2)
    assert "a AVRO schema needs its definition" in cli.error("schemas", "upload", topic, "--type", "AVRO", status=2)
    assert "invalid choice: 'CSV'" in cli.run(
        "schemas", "upload", topic, "--type", "CSV", "--definition", "x", status=2).stderr
    assert "invalid choice: 'SOMETIMES'" in cli.run(
        "schemas", "compatibility", topic, "--set", "SOMETIMES", status=2).stderr


def test_a_refused_upload_and_the_test_command(cli: AdminCli) -> None:
    topic = unique_topic("cli-schema-refused")
    cli.run("topics", "create", topic)
    cli.run("schemas", "upload", topic, "--type", "AVRO", "--definition", ORDER_V0)
    refused = cli.error("schemas", "upload", topic, "--type", "AVRO", "--definition", ORDER_TEXT_ID)
    assert refused.startswith("error: INCOMPATIBLE_SCHEMA: ")
    assert cli.json("schemas", "test", topic, "--type", "AVRO", "--definition", ORDER_V0) == {
        "topic": topic, "compatible": True, "reason": None}
    tested = cli.json("schemas", "test", topic, "--type", "AVRO", "--definition", ORDER_TEXT_ID)
    assert tested["compatible"] is False and tested["reason"]
    assert "not compatible: " in cli.run("schemas", "test", topic, "--type", "AVRO", "--definition",
                                         ORDER_TEXT_ID).stdout
    assert [each["version"] for each in cli.json("schemas", "versions", topic)["versions"]] == [0]


def test_compatibility_strategy_set_and_cleared(cli: AdminCli) -> None:
    topic = unique_topic("cli-schema-strategy")
    cli.run("topics", "create", topic)
    inherited = cli.json("schemas", "compatibility", topic)
    assert inherited["topic_strategy"] is None
    assert cli.json("schemas", "compatibility", topic, "--set", "backward") == {
        "topic": topic, "strategy": "BACKWARD", "topic_strategy": "BACKWARD"}
    assert "BACKWARD (the topic's own)" in cli.run("schemas", "compatibility", topic).stdout
    cleared = cli.json("schemas", "compatibility", topic, "--clear")
    assert cleared["topic_strategy"] is None and cleared["strategy"] == inherited["strategy"]


def test_topics_delete_keep_schema(cli: AdminCli) -> None:
    kept, dropped = unique_topic("cli-keep"), unique_topic("cli-drop")
    for topic in (kept, dropped):
        cli.run("topics", "create", topic)
        cli.run("schemas", "upload", topic, "--type", "STRING")
    cli.run("topics", "delete", kept, "--keep-schema")
    cli.run("topics", "delete", dropped)
    assert cli.json("schemas", "get", kept)["type"] == "STRING"
    assert cli.error("schemas", "get", dropped).startswith("error: NOT_FOUND: ")
