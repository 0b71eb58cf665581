"""The chart's PrometheusRule (monitoring.prometheusRule.enabled): off by default, the alerts the
issue asks for with the thresholds of values.yaml. Each expression is checked in a real Prometheus
and by promtool in tests/e2e/test_dashboards.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.chart.render import PRODUCTION_VALUES, Manifest, of_kind, render

# The fields of a rule in the Prometheus Operator's PrometheusRule CRD (monitoring.coreos.com/v1): the
# validator knows no CRD kinds, so the structure is checked here, the expressions in a real Prometheus.
RULE_FIELDS = {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}
ALERTS = {"HeraldBacklogGrowing", "HeraldDeadLettersNotMoved", "HeraldDeadLettersWaitingForReplay",
          "HeraldStorageDiskNearlyFull", "HeraldStorageRefusingAdds", "HeraldJournalFsyncSlow",
          "HeraldBrokerNotReady", "HeraldBrokerLeaseLost"}


def rules(manifests: list[Manifest]) -> dict[str, dict[str, Any]]:
    (rule,) = of_kind(manifests, "PrometheusRule")
    return {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}


def test_no_prometheus_rule_by_default(default_manifests: list[Manifest]) -> None:
    assert not of_kind(default_manifests, "PrometheusRule")


def test_production_ships_every_alert_with_a_severity_and_what_to_do(production_manifests: list[Manifest]) -> None:
    (rule,) = of_kind(production_manifests, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"  # monitoring.labels
    assert set(rule) == {"apiVersion", "kind", "metadata", "spec"} and set(rule["spec"]) == {"groups"}
    names = [group["name"] for group in rule["spec"]["groups"]]
    assert len(names) == len(set(names)) and all(names)
    found = rules(production_manifests)
    assert set(found) == ALERTS
    for name, alert in found.items():
        assert set(alert) <= RULE_FIELDS and isinstance(alert["expr"], str), name
        assert all(isinstance(v, str) for v in [*alert["labels"].values(), *alert["annotations"].values()]), name
        assert alert["labels"]["severity"] in ("info", "warning", "critical"), name
        assert alert["annotations"]["summary"] and alert["annotations"]["description"], name
        assert "namespace" in alert["expr"], f"{name}: one release's alerts must stay apart by namespace"


def test_thresholds_come_from_the_values(tmp_path: Path) -> None:
    values = tmp_path / "alerts.yaml"  # a file: --set would pass 0.2 as a string
    values.write_text(yaml.safe_dump({"broker": {"replicas": 4}, "monitoring": {"prometheusRule": {
        "backlogMessages": 5000, "backlogFor": "30m", "diskFreeRatio": 0.2, "fsyncSeconds": 0.05,
        "deadLettersFor": "1h", "alertLabels": {"team": "messaging"}}}}))
    found = rules(render(PRODUCTION_VALUES, values))
    assert found["HeraldBacklogGrowing"]["expr"].endswith("> 5000")
    assert "[30m]" in found["HeraldBacklogGrowing"]["expr"] and found["HeraldBacklogGrowing"]["for"] == "30m"
    assert found["HeraldStorageDiskNearlyFull"]["expr"].endswith("< 0.2")
    assert found["HeraldJournalFsyncSlow"]["expr"].endswith("> 0.05")
    assert found["HeraldDeadLettersNotMoved"]["for"] == "1h"
    assert found["HeraldBrokerNotReady"]["expr"].endswith("< 4")
    assert all(alert["labels"]["team"] == "messaging" for alert in found.values())
