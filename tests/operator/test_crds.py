"""The CRD manifests: their OpenAPI v3 schemas accept good resources and refuse bad ones, the way
the API server would (types, minimums, enums, patterns, required fields), and they declare what
kubectl shows (status subresource, printer columns, short names)."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from tests.operator.conftest import crd, crd_schema


def errors(kind: str, spec: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft202012Validator(crd_schema(kind))
    body = {"apiVersion": "herald.io/v1alpha1", "kind": kind.capitalize(), "metadata": {"name": "x"}, "spec": spec}
    return [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(body)]


@pytest.mark.parametrize("spec", [
    {},
    {"partitions": 0},
    {"tenant": "acme", "namespace": "orders", "name": "created.v1", "partitions": 12, "persistent": True},
    {"retention": {"timeSeconds": -1, "sizeBytes": 1073741824}, "ttlSeconds": 3600, "deduplication": True,
     "backlogQuota": {"limitBytes": 10485760, "limitSeconds": 600, "policy": "consumer_backlog_eviction"},
     "persistence": {"ensembleSize": 3, "writeQuorum": 2, "ackQuorum": 2}, "maxProducers": 0, "maxConsumers": 10,
     "maxConsumersPerSubscription": 2, "deletionPolicy": "Retain"},
])
def test_good_topics_pass_the_schema(spec: dict[str, Any]) -> None:
    assert errors("topic", spec) == []


@pytest.mark.parametrize(("spec", "why"), [
    ({"partitions": -1}, "minimum"),
    ({"partitions": "3"}, "type"),
    ({"deletionPolicy": "Orphan"}, "enum"),
    ({"backlogQuota": {"policy": "drop_everything"}}, "enum"),
    ({"tenant": "a b"}, "pattern"),
    ({"name": "x/y"}, "pattern"),
    ({"retention": {"timeSeconds": -2}}, "minimum"),
    ({"ttlSeconds": -5}, "minimum"),
    ({"persistence": {"ensembleSize": 3, "writeQuorum": 2}}, "required"),
    ({"persistence": {"ensembleSize": 0, "writeQuorum": 1, "ackQuorum": 1}}, "minimum"),
    ({"maxProducers": -1}, "minimum"),
    ({"persistent": "yes"}, "type"),
])
def test_bad_topics_fail_the_schema(spec: dict[str, Any], why: str) -> None:
    found = errors("topic", spec)
    assert found, f"{spec} passed ({why} expected)"


def test_a_resource_without_spec_fails() -> None:
    validator = jsonschema.Draft202012Validator(crd_schema("topic"))
    assert list(validator.iter_errors({"apiVersion": "herald.io/v1alpha1", "kind": "Topic", "metadata": {}}))


@pytest.mark.parametrize("spec", [
    {"topic": "orders"},
    {"topic": "persistent://acme/orders/created", "subscriptionName": "billing", "type": "Key_Shared",
     "initialPosition": "Earliest", "deletionPolicy": "Retain",
     "deadLetterPolicy": {"maxRedeliverCount": 5, "deadLetterTopic": "persistent://acme/orders/created-dlq",
                          "retryLetterTopic": "persistent://acme/orders/created-retry"}},
    {"topic": "non-persistent://public/default/ticks", "type": "Failover"},
])
def test_good_subscriptions_pass_the_schema(spec: dict[str, Any]) -> None:
    assert errors("subscription", spec) == []


@pytest.mark.parametrize(("spec", "why"), [
    ({}, "required topic"),
    ({"topic": ""}, "minLength"),
    ({"topic": "Orders_Topic"}, "not a resource name nor a full topic name"),
    ({"topic": "kafka://a/b/c"}, "pattern"),
    ({"topic": "orders", "type": "Queue"}, "enum"),
    ({"topic": "orders", "initialPosition": "Middle"}, "enum"),
    ({"topic": "orders", "deadLetterPolicy": {"maxRedeliverCount": 0}}, "minimum"),
    ({"topic": "orders", "deadLetterPolicy": {"deadLetterTopic": "persistent://a/b/c"}}, "required"),
    ({"topic": "orders", "deadLetterPolicy": {"maxRedeliverCount": 1, "deadLetterTopic": "dlq"}}, "pattern"),
])
def test_bad_subscriptions_fail_the_schema(spec: dict[str, Any], why: str) -> None:
    assert errors("subscription", spec), f"{spec} passed ({why} expected)"


@pytest.mark.parametrize("kind", ["topic", "subscription"])
def test_crds_declare_status_columns_and_short_names(kind: str) -> None:
    manifest = crd(kind)
    assert manifest["apiVersion"] == "apiextensions.k8s.io/v1"
    assert manifest["spec"]["group"] == "herald.io"
    (version,) = manifest["spec"]["versions"]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"] for c in version["additionalPrinterColumns"]}
    assert {"Topic", "Backlog", "Phase", "Age"} <= columns
    assert manifest["spec"]["names"]["shortNames"]
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert {"phase", "conditions", "observedGeneration", "backlog"} <= set(status)
