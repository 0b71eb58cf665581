"""`herald admin schemas`: a topic's schemas (a partition's are its partitioned topic's): get (a
version, the latest by default), versions, upload (a new version, checked by the topic's
compatibility strategy), delete (every version), test (would upload accept it?) and compatibility
(show, --set or --clear the topic's strategy: a topic policy over its namespace's).

A definition comes from --file or --definition: for AVRO and JSON it is the schema's JSON text
(checked to be JSON here, before any call), for PROTOBUF_NATIVE the descriptor's bytes."""

from __future__ import annotations

import argparse
import base64
import json
from typing import Any

from herald.api.v1 import admin_pb2
from herald.cli.admin.arguments import CommandGroup, HeraldUsageError, non_negative
from herald.cli.admin.render import print_pairs, print_table, shorten
from herald.client.admin import AdminClient
from herald.common.codec.schema_info import SchemaInfo

# Pulsar's schema type names, as the registry keeps them.
SCHEMA_TYPES = (
    "NONE", "BYTES", "STRING", "JSON", "AVRO", "PROTOBUF", "PROTOBUF_NATIVE", "KEY_VALUE", "BOOLEAN", "INT8",
    "INT16", "INT32", "INT64", "FLOAT", "DOUBLE", "DATE", "TIME", "TIMESTAMP", "INSTANT", "LOCAL_DATE",
    "LOCAL_TIME", "LOCAL_DATE_TIME",
)
# Pulsar's SchemaCompatibilityStrategy names (herald.metadata.policies checks them too).
STRATEGIES = ("ALWAYS_INCOMPATIBLE", "ALWAYS_COMPATIBLE", "BACKWARD", "FORWARD", "FULL", "BACKWARD_TRANSITIVE",
              "FORWARD_TRANSITIVE", "FULL_TRANSITIVE")
_JSON_DEFINED = frozenset({"AVRO", "JSON", "PROTOBUF"})
_STRATEGY_FIELD = "schema_compatibility_strategy"


def _property(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"a property is key=value, got {text!r}")
    return name, value


def schema_from_args(args: argparse.Namespace) -> SchemaInfo:
    """The schema --type, --file / --definition and --property describe (HeraldUsageError for a
    file that cannot be read or a definition that cannot be one)."""
    if args.file is not None:
        try:
            with open(args.file, "rb") as source:
                data = source.read()
        except OSError as exc:
            raise HeraldUsageError(f"cannot read schema file {args.file}: {exc.strerror or exc}") from None
        where = f"file {args.file}"
    elif args.definition is not None:
        data, where = args.definition.encode(), "--definition"
    else:
        data, where = b"", ""
    if args.type in _JSON_DEFINED:
        if not data:
            raise HeraldUsageError(f"a {args.type} schema needs its definition: give --file or --definition")
        try:
            json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise HeraldUsageError(f"the {args.type} definition in {where} is not JSON: {exc}") from None
    return SchemaInfo(args.type, data, dict(args.property or ()))


def _definition_text(data: bytes) -> str | None:
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None


def schema_json(topic: str, version: int, schema: SchemaInfo) -> dict[str, Any]:
    return {"topic": topic, "version": version, "type": schema.type, "definition": _definition_text(schema.data),
            "data": base64.b64encode(schema.data).decode(), "properties": dict(schema.properties)}


async def schemas_get(admin: AdminClient, args: argparse.Namespace) -> Any:
    version, schema = await admin.get_schema(args.topic, args.version)
    if args.json:
        return schema_json(args.topic, version, schema)
    text = _definition_text(schema.data)
    print_pairs([("topic", args.topic), ("version", version), ("type", schema.type),
                 *((f"property {key}", value) for key, value in sorted(schema.properties.items()))])
    if schema.data:
        print(text if text is not None else f"definition: {len(schema.data)} bytes (binary; --json shows them)")
    return None


async def schemas_versions(admin: AdminClient, args: argparse.Namespace) -> Any:
    history = await admin.schema_versions(args.topic)
    if args.json:
        return {"topic": args.topic, "versions": [schema_json(args.topic, v, s) for v, s in history]}
    print_table(("VERSION", "TYPE", "DEFINITION"),
                [(v, s.type, shorten(_definition_text(s.data) or f"{len(s.data)} bytes", 60)) for v, s in history])
    return None


async def schemas_upload(admin: AdminClient, args: argparse.Namespace) -> Any:
    schema = schema_from_args(args)
    version = await admin.upload_schema(args.topic, schema)
    if args.json:
        return {"topic": args.topic, "version": version, "type": schema.type}
    print(f"topic {args.topic}: {schema.type} schema is version {version}")
    return None


async def schemas_delete(admin: AdminClient, args: argparse.Namespace) -> Any:
    version = await admin.delete_schema(args.topic)
    if args.json:
        return {"topic": args.topic, "deleted_version": version}
    print(f"topic {args.topic}: " + ("it had no schema" if version is None
                                     else f"schema deleted (versions up to {version})"))
    return None


async def schemas_test(admin: AdminClient, args: argparse.Namespace) -> Any:
    schema = schema_from_args(args)
    reason = await admin.test_schema_compatibility(args.topic, schema)
    if args.json:
        return {"topic": args.topic, "compatible": reason is None, "reason": reason}
    print(f"topic {args.topic}: " + ("compatible: an upload would be accepted" if reason is None
                                     else f"not compatible: {reason}"))
    return None


async def schemas_compatibility(admin: AdminClient, args: argparse.Namespace) -> Any:
    if args.set is not None:
        await admin.set_topic_policies(args.topic, admin_pb2.Policies(schema_compatibility_strategy=args.set))
    elif args.clear:
        await admin.set_topic_policies(args.topic, clear=[_STRATEGY_FIELD])
    own = await admin.topic_policies(args.topic)
    effective = await admin.effective_policies(args.topic)
    mine = own.schema_compatibility_strategy if own.HasField("schema_compatibility_strategy") else None
    strategy_in_force = (effective.schema_compatibility_strategy
                         if effective.HasField("schema_compatibility_strategy") else None)
    if args.json:
        return {"topic": args.topic, "strategy": strategy_in_force, "topic_strategy": mine}
    where = "the topic's own" if mine is not None else "inherited from its namespace or the broker"
    print(f"topic {args.topic}: {strategy_in_force or 'the broker default'} ({where})")
    return None


def _definition_flags(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--type", type=str.upper, choices=SCHEMA_TYPES, required=True, metavar="TYPE",
                     help="AVRO, JSON, PROTOBUF_NATIVE, STRING, KEY_VALUE... (any case)")
    source = sub.add_mutually_exclusive_group()
    source.add_argument("--file", metavar="FILE", help="read the definition from FILE")
    source.add_argument("--definition", metavar="TEXT", help="the definition itself (e.g. Avro's JSON)")
    sub.add_argument("--property", type=_property, action="append", metavar="KEY=VALUE",
                     help="a property of the schema (repeat for more)")


def add_schema_commands(groups: CommandGroup) -> None:
    schemas = groups.group("schemas", "a topic's schemas: get, versions, upload, delete, test, compatibility")
    sub = schemas.command("get", "show a version of the topic's schema (default: the latest)", schemas_get)
    sub.add_argument("topic", help="topic name")
    sub.add_argument("--version", type=non_negative, default=None, metavar="N", help="this version")
    sub = schemas.command("versions", "list every version of the topic's schema", schemas_versions)
    sub.add_argument("topic", help="topic name")
    sub = schemas.command("upload", "add a schema version (checked by the topic's compatibility strategy)",
                          schemas_upload)
    sub.add_argument("topic", help="topic name")
    _definition_flags(sub)
    sub = schemas.command("delete", "delete every version of the topic's schema", schemas_delete)
    sub.add_argument("topic", help="topic name")
    sub = schemas.command("test", "would upload accept this schema? (nothing is stored)", schemas_test)
    sub.add_argument("topic", help="topic name")
    _definition_flags(sub)
    sub = schemas.command("compatibility", "show the topic's compatibility strategy, or --set / --clear it",
                          schemas_compatibility)
    sub.add_argument("topic", help="topic name")
    change = sub.add_mutually_exclusive_group()
    change.add_argument("--set", type=str.upper, choices=STRATEGIES, metavar="STRATEGY", help=", ".join(STRATEGIES))
    change.add_argument("--clear", action="store_true", help="inherit the namespace's (or the broker's) again")
