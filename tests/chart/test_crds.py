"""The Topic and Subscription CRDs the chart ships: identical to the operator's (operator/crds/,
copied by `make crds`), valid CustomResourceDefinitions, and the chart's examples valid against
their schemas the way the API server would take them (an unknown field would be pruned silently,
so here it is an error)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from tests.chart.render import CHART, KUBERNETES_VERSION, ROOT

OPERATOR_CRDS = ROOT / "operator" / "crds"
CHART_CRDS = CHART / "crds"
EXAMPLES = sorted((CHART / "examples").glob("*.yaml"))


def _load(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(path.read_text())
    return document


def _crds() -> dict[tuple[str, str], dict[str, Any]]:
    """Herald's CRDs by (group/version, kind), from the chart's copies (kopf.dev's peering CRDs aside)."""
    found = {}
    for path in sorted(CHART_CRDS.glob("*.yaml")):
        crd = _load(path)
        if crd["spec"]["group"] != "herald.io":
            continue
        for version in crd["spec"]["versions"]:
            found[(f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"])] = crd
    return found


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    """An openAPIV3Schema as JSON Schema that refuses the fields the API server would prune: objects
    with declared properties get additionalProperties: false, unless they preserve unknown fields."""
    schema = copy.deepcopy(schema)

    def walk(node: dict[str, Any]) -> None:
        if node.get("type") == "object" and "properties" in node and not node.get(
                "x-kubernetes-preserve-unknown-fields") and "additionalProperties" not in node:
            node["additionalProperties"] = False
        for child in node.get("properties", {}).values():
            walk(child)
        if isinstance(node.get("items"), dict):
            walk(node["items"])
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"])

    walk(schema)
    return schema


def validate_resource(resource: dict[str, Any]) -> None:
    crd = _crds()[(resource["apiVersion"], resource["kind"])]
    (version,) = [v for v in crd["spec"]["versions"] if f"{crd['spec']['group']}/{v['name']}" == resource["apiVersion"]]
    jsonschema.Draft7Validator(_strict(version["schema"]["openAPIV3Schema"])).validate(resource)


def test_the_chart_ships_the_operators_crds_unchanged() -> None:
    operator = {p.name: p.read_bytes() for p in OPERATOR_CRDS.glob("*.yaml")}
    chart = {p.name: p.read_bytes() for p in CHART_CRDS.glob("*.yaml")}
    assert operator, f"no CRDs in {OPERATOR_CRDS}"
    assert set(chart) == set(operator), f"chart has {sorted(chart)}, operator {sorted(operator)}: run `make crds`"
    for name in operator:
        assert chart[name] == operator[name], (
            f"charts/herald/crds/{name} differs from operator/crds/{name}: run `make crds`")


@pytest.mark.parametrize("path", sorted(CHART_CRDS.glob("*.yaml")), ids=lambda p: p.name)
def test_each_crd_is_a_valid_custom_resource_definition(path: Path) -> None:
    crd = _load(path)
    kubernetes_validate.validate(crd, KUBERNETES_VERSION, strict=True)
    jsonschema.Draft7Validator.check_schema(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    assert crd["spec"]["group"] in ("herald.io", "kopf.dev")


def test_there_is_an_example_of_each_kind() -> None:
    kinds = {_load(path)["kind"] for path in EXAMPLES}
    assert kinds == {kind for _, kind in _crds()}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_each_example_is_valid_against_its_crd(path: Path) -> None:
    resource = _load(path)
    validate_resource(resource)
    assert resource["metadata"]["name"]


def test_an_example_with_a_misspelt_field_is_refused() -> None:
    topic = _load(CHART / "examples" / "topic.yaml")
    topic["spec"]["partition"] = topic["spec"].pop("partitions")
    with pytest.raises(jsonschema.ValidationError, match="partition"):
        validate_resource(topic)


def test_an_example_with_a_bad_value_is_refused() -> None:
    subscription = _load(CHART / "examples" / "subscription.yaml")
    subscription["spec"]["type"] = "KeyShared"  # Pulsar's spelling is Key_Shared
    with pytest.raises(jsonschema.ValidationError, match="KeyShared"):
        validate_resource(subscription)


def test_kopfs_peering_crds_are_shipped_for_leader_election() -> None:
    kinds = {(crd["spec"]["names"]["kind"], crd["spec"]["scope"]) for crd in map(_load, CHART_CRDS.glob("*.yaml"))
             if crd["spec"]["group"] == "kopf.dev"}
    assert kinds == {("KopfPeering", "Namespaced"), ("ClusterKopfPeering", "Cluster")}


def test_herald_crds_validate_status_instead_of_keeping_unknown_fields() -> None:
    for crd in _crds().values():
        status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
        assert "x-kubernetes-preserve-unknown-fields" not in status, crd["metadata"]["name"]
        assert {"phase", "conditions", "observedGeneration"} <= set(status["properties"])


def test_kubernetes_validate_checks_the_cel_rules_structure() -> None:
    """The CRDs' x-kubernetes-validations pass kubernetes-validate above, and it does read them: a rule
    with a misspelt key is refused (what it cannot do is run CEL: see tests/operator/test_crds.py)."""
    crd = _load(CHART_CRDS / "topic.yaml")
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["x-kubernetes-validations"]
    spec["x-kubernetes-validations"][0]["rulez"] = spec["x-kubernetes-validations"][0].pop("rule")
    with pytest.raises(kubernetes_validate.ValidationError, match="rulez"):
        kubernetes_validate.validate(crd, KUBERNETES_VERSION, strict=True)
