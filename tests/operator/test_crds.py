"""The CRD manifests: their OpenAPI v3 schemas accept good resources and refuse bad ones, the way
the API server would (types, minimums, enums, patterns, required fields), and they declare what
kubectl shows (status subresource, printer columns, short names)."""

from __future__ import annotations

import re
from typing import Any

import jsonschema
import pytest

from tests.operator.conftest import crd, crd_schema, strict_status_schema


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


# ---- CEL rules (x-kubernetes-validations), item 10 of issue 22 --------------------------------------
# No CEL evaluator is installed here (cel-python on PyPI would be one), so the rules are checked for
# what they say and where they sit; the operator refuses the same specs itself
# (tests/operator/test_pause_and_rules.py, test_desired_state.py).

def rules(node: dict[str, Any]) -> list[str]:
    return [item["rule"].strip() for item in node.get("x-kubernetes-validations", ())]


def referenced_fields(rule: str) -> set[str]:
    return set(re.findall(r"\b(?:self|oldSelf)\.([A-Za-z]+)", rule))


def test_the_fields_naming_the_herald_topic_cannot_change() -> None:
    spec = crd_schema("topic")["properties"]["spec"]
    for field in ("tenant", "namespace", "persistent"):
        assert rules(spec["properties"][field]) == ["self == oldSelf"], field
        assert "default" in spec["properties"][field], f"{field} is always set, so a transition rule always runs"
    # spec.name has no default (metadata.name stands in): set or unset, it must stay as it was.
    (name_rule,) = rules(spec)
    assert name_rule == "has(self.name) == has(oldSelf.name) && (!has(self.name) || self.name == oldSelf.name)"


def test_the_subscription_name_cannot_change() -> None:
    spec = crd_schema("subscription")["properties"]["spec"]
    (rule,) = rules(spec)
    assert " ".join(rule.split()) == (
        "has(self.subscriptionName) == has(oldSelf.subscriptionName) && "
        "(!has(self.subscriptionName) || self.subscriptionName == oldSelf.subscriptionName)")


def test_quorums_are_ordered_by_a_rule_on_persistence() -> None:
    persistence = crd_schema("topic")["properties"]["spec"]["properties"]["persistence"]
    (rule,) = rules(persistence)
    assert rule == "self.ensembleSize >= self.writeQuorum && self.writeQuorum >= self.ackQuorum"
    # The three are required, so the rule never reads a missing field.
    assert referenced_fields(rule) == set(persistence["required"])


@pytest.mark.parametrize("kind", ["topic", "subscription"])
def test_every_rule_names_declared_fields_and_says_what_to_do(kind: str) -> None:
    found = 0

    def walk(node: dict[str, Any]) -> None:
        nonlocal found
        for item in node.get("x-kubernetes-validations", ()):
            found += 1
            assert "cannot change" in item["message"] or "ensembleSize >= writeQuorum" in item["message"], item
            fields = referenced_fields(item["rule"])
            assert fields <= set(node.get("properties", {})), (item["rule"], sorted(node.get("properties", {})))
        for child in node.get("properties", {}).values():
            walk(child)
    walk(crd_schema(kind)["properties"]["spec"])
    assert found


@pytest.mark.parametrize("kind", ["topic", "subscription"])
def test_a_ready_column_and_a_status_with_a_real_schema(kind: str) -> None:
    (version,) = crd(kind)["spec"]["versions"]
    columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
    assert columns["Ready"]["jsonPath"] == '.status.conditions[?(@.type=="Ready")].status'
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert "x-kubernetes-preserve-unknown-fields" not in status
    assert "Paused" in status["properties"]["phase"]["enum"]


def test_the_status_the_operator_writes_is_declared() -> None:
    from herald_operator import ownership, status

    for updates in (status.synced_conditions(True, [], "topic x"), status.paused_conditions("paused"),
                    status.conflict_conditions(ownership.conflict_message("topic x", ownership.Claim(
                        "2026-01-01T00:00:00Z", "u", "Topic", "ns", "a"))),
                    status.failed_conditions(status.ADMIN_UNAVAILABLE, "down")):
        written = status.status_patch(None, updates, 3, topic="persistent://a/b/c", partitions=2, backlog=0,
                                      msgRateIn=0.0, msgRateOut=0.0)
        jsonschema.Draft202012Validator(strict_status_schema("topic")).validate(written)
