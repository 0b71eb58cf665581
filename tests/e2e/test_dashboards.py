"""The Grafana dashboards (charts/herald/dashboards/*.json) and the chart's alerts against what Herald
really exports, in a real Prometheus: every dashboard is well formed (ids, titles, grid positions, the
`datasource` variable on every panel and query); a `herald standalone` (dlq-worker on) is scraped every
second by Debian's Prometheus during a produce-consume that makes dead letters through the proxy; then
every panel's query, with its variables at their defaults, is valid PromQL there and has data unless
listed in EMPTY_ON_THIS_TRAFFIC (with the reason); every alert rule of the chart's PrometheusRule passes
`promtool check rules`, is evaluated by that Prometheus without error and names only exported metrics.
docs/metrics.md lists every family the standalone exports, and names no other."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from herald.client import AsyncClient, ConsumerType, DeadLetterPolicy, InitialPosition
from herald.client.metrics import ClientMetrics
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

from tests.chart.render import render
from tests.conftest import ROOT, StandaloneProcess, running_standalone
from tests.helpers import unique_topic
from tests.prometheus import PROMTOOL, Prometheus, QueryError, binary, running_prometheus
from tests.promql import metric_names, variable_metric_names

DASHBOARDS = ROOT / "charts" / "herald" / "dashboards"
METRICS_DOC = ROOT / "docs" / "metrics.md"
EXPECTED = {"overview.json", "topic.json", "broker.json", "storage.json", "proxy.json", "dlq.json"}
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
DEADLINE = 30.0
LETTERS = 5

# ---- the dashboards --------------------------------------------------------------------------------

def load_dashboards() -> dict[str, dict[str, Any]]:
    return {path.name: json.loads(path.read_text()) for path in sorted(DASHBOARDS.glob("*.json"))}


def all_panels(panels: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside collapsed rows too."""
    for panel in panels:
        yield panel
        yield from all_panels(panel.get("panels", []))


def query_of(variable: dict[str, Any]) -> str:
    query = variable.get("query", "")
    return str(query.get("query", "") if isinstance(query, dict) else query)


def used_metrics(dashboards: dict[str, dict[str, Any]]) -> dict[str, set[str]]:
    """Metric name -> where it is used ("<file>: <panel title>" or "<file>: variable <name>")."""
    used: dict[str, set[str]] = {}
    for file, board in dashboards.items():
        for panel in all_panels(board["panels"]):
            for target in panel.get("targets", []):
                for name in metric_names(target["expr"]):
                    used.setdefault(name, set()).add(f"{file}: {panel['title']}")
        for variable in board["templating"]["list"]:
            if variable["type"] == "query":
                for name in variable_metric_names(query_of(variable)):
                    used.setdefault(name, set()).add(f"{file}: variable {variable['name']}")
    return used


# ---- what a running standalone exports -----------------------------------------------------------

SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "summary": ("_count", "_sum"),
            "gaugehistogram": ("_bucket", "_gcount", "_gsum")}


def family_name(family: Metric) -> str:
    """The name a family is documented and known by: a counter's with its `_total`."""
    return f"{family.name}_total" if family.type == "counter" else family.name


def exposed_names(families: Iterable[Metric]) -> set[str]:
    """Every name a query can use for these families: the family's and its series' (x_total,
    x_bucket, x_count, x_sum), with or without samples."""
    names: set[str] = set()
    for family in families:
        names.add(family.name)
        names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ()))
        names.update(sample.name for sample in family.samples)
    return names


@dataclass(frozen=True)
class Exported:
    families: list[Metric]  # the standalone's scrape after the produce-consume
    client_families: list[Metric]  # ClientMetrics' (an application exports them, not a service)

    @property
    def names(self) -> set[str]:
        return exposed_names(self.families)


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return str(reply.read().decode())


def sample(families: list[Metric], name: str, **labels: str) -> float:
    return sum(s.value for family in families for s in family.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


async def produce_dead_letters(server: StandaloneProcess) -> Exported:
    """Through the proxy: messages a consumer negatively acknowledges until the dlq-worker moved them
    to the dead-letter topic. Scrapes until every family the dashboards filter by label has its
    series (a deadline, not a sleep)."""
    topic = unique_topic("dashboards")
    dlq_topic = f"{topic}-s-DLQ"
    checks: dict[str, Callable[[list[Metric]], bool]] = {
        # The messages went as one batch, or a few: one dead letter is one entry.
        "letters moved": lambda f: sample(f, "herald_dlq_messages_moved_total") >= LETTERS,
        "dead letters stored": lambda f: sample(f, "herald_broker_messages_in_total", topic=dlq_topic) >= LETTERS,
        "replay backlog": lambda f: sample(f, "herald_broker_backlog_messages", topic=dlq_topic,
                                           subscription="herald-dlq-replay") >= LETTERS,
        "redeliveries": lambda f: sample(f, "herald_broker_redeliveries_total", topic=topic, subscription="s") >= 1,
        "publish latency": lambda f: sample(f, "herald_broker_publish_latency_seconds_count") >= 2,
        "forwarded": lambda f: sample(f, "herald_proxy_forwarded_bytes_total", direction="to_client") > 0,
        "live broker": lambda f: sample(f, "herald_lookup_live_brokers") == 1,
    }
    async with AsyncClient(server.proxy_url, operation_timeout=30) as client:
        client_families = list(ClientMetrics(client).describe())
        producer = await client.create_producer(topic)
        for future in [await producer.send_async(b"letter-%d" % i) for i in range(LETTERS)]:
            await future
        consumer = await client.subscribe(topic, "s", ConsumerType.Shared, InitialPosition.Earliest,
                                          negative_ack_redelivery_delay=0.05,
                                          dead_letter_policy=DeadLetterPolicy(max_redeliver_count=1))
        passed: set[str] = set()
        deadline = time.monotonic() + DEADLINE
        while True:
            message = await consumer.receive(timeout=0.1)
            if message is not None:
                consumer.negative_acknowledge(message)
            families = list(text_string_to_metric_families(await asyncio.to_thread(scrape, server.metrics_url)))
            passed |= {name for name, check in checks.items() if check(families)}
            if passed == set(checks):
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"never seen on {server.metrics_url}: {sorted(set(checks) - passed)}")
        await consumer.close()
        await producer.close()
    return Exported(families, client_families)


@pytest.fixture(scope="module")
def with_dlq_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """One standalone for the module, every service in it (the dlq-worker too)."""
    with running_standalone(tmp_path_factory.mktemp("dashboards") / "data", dlq_worker=True) as server:
        yield server


@pytest.fixture(scope="module")
def alert_rules(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The chart's PrometheusRule (helm template, alerts on) as a Prometheus rule file."""
    rules = [m for m in render(sets=("monitoring.prometheusRule.enabled=true",)) if m["kind"] == "PrometheusRule"]
    assert len(rules) == 1
    path = tmp_path_factory.mktemp("alerts") / "herald-rules.yml"
    path.write_text(yaml.safe_dump({"groups": rules[0]["spec"]["groups"]}))
    return path


@pytest.fixture(scope="module")
def prometheus(with_dlq_worker: StandaloneProcess, alert_rules: Path,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """Debian's Prometheus scraping the standalone every second and evaluating the chart's alerts."""
    target = f"127.0.0.1:{with_dlq_worker.metrics_port}"
    with running_prometheus(tmp_path_factory.mktemp("prometheus"), [target], (alert_rules,)) as server:
        server.wait_for('up{job="herald"} == 1', f"the standalone's metrics ({target}) scraped")
        yield server


@pytest.fixture(scope="module")
def exported(with_dlq_worker: StandaloneProcess, prometheus: Prometheus) -> Exported:
    """The traffic, under Prometheus' scraping; returns once Prometheus holds its results too."""
    exported = asyncio.run(produce_dead_letters(with_dlq_worker))
    prometheus.wait_for(f"herald_dlq_messages_moved_total >= {LETTERS}", "the dead letters moved")
    prometheus.wait_for('herald_broker_backlog_messages{subscription="herald-dlq-replay"} > 0',
                        "the dead letters waiting for replay")
    # The broker publishes its per-topic series periodically: a rate over a series needs two samples,
    # so wait until every Herald series has two in the window the panels use.
    every = '{__name__=~"herald_.+"}'
    deadline = time.monotonic() + DEADLINE
    while True:
        now, before = ({json.dumps(s["metric"], sort_keys=True) for s in prometheus.query(expr)}
                       for expr in (every, f"{every} offset 3s"))
        if now <= before:  # every series was scraped 3 s ago already (and since: scrapes are 1 s apart)
            return exported
        if time.monotonic() > deadline:
            raise AssertionError(f"series never scraped twice: {sorted(now - before)[:5]}")
        time.sleep(0.2)


# ---- the extractor -----------------------------------------------------------------------------------

def test_the_extractor_finds_an_unknown_metric_among_functions_labels_and_variables() -> None:
    expr = ('histogram_quantile(0.99, sum by (le, instance) (rate(herald_no_such_seconds_bucket'
            '{namespace=~"$namespace", topic="a b"}[$__rate_interval])))')
    assert metric_names(expr) == {"herald_no_such_seconds_bucket"}
    known = {"herald_broker_publish_latency_seconds_bucket"}
    assert metric_names(expr) - known == {"herald_no_such_seconds_bucket"}


@pytest.mark.parametrize(("expr", "names"), [
    ("sum(rate(a_total[5m])) by (topic, subscription)", {"a_total"}),
    ("topk(10, sum without (instance) (b{x=~'y|z'}))", {"b"}),
    ("1 - c_free / on (instance) group_left (part) c_capacity offset 1h30m", {"c_free", "c_capacity"}),
    ("d > bool 0.5e3 and ignoring(le) e unless f", {"d", "e", "f"}),
    ('sum(increase(g_total{error!="x"}[1h])) or vector(0)', {"g_total"}),
    ('{__name__="h_total", job="j"} * on() group_right i', {"h_total", "i"}),
    ("count_values(\"value\", j) / scalar(k) + 0x1F", {"j", "k"}),
    ("max_over_time(l[$__range:${__interval}]) @ end()", {"l"}),
    ("sum by (le) (m_bucket) # sum by (le) (commented_out)", {"m_bucket"}),
])
def test_the_extractor_keeps_metric_names_only(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


@pytest.mark.parametrize(("query", "names"), [
    ('label_values(herald_broker_backlog_messages{topic=~"$topic", a="b,c"}, subscription)',
     {"herald_broker_backlog_messages"}),
    ("label_values(namespace)", set()),
    ("label_names()", set()),
    ("metrics(herald_.*)", set()),
    ("query_result(topk(5, herald_broker_topics))", {"herald_broker_topics"}),
])
def test_the_extractor_reads_grafana_variable_queries(query: str, names: set[str]) -> None:
    assert variable_metric_names(query) == names


# ---- the dashboards' structure ---------------------------------------------------------------------

def test_the_six_dashboards_exist_with_unique_uids_titles_and_the_herald_tag() -> None:
    dashboards = load_dashboards()
    assert set(dashboards) == EXPECTED
    uids = [board["uid"] for board in dashboards.values()]
    assert len(set(uids)) == len(uids) and all(uids)
    titles = [board["title"] for board in dashboards.values()]
    assert len(set(titles)) == len(titles) and all(titles)
    for file, board in dashboards.items():
        assert "herald" in board["tags"], file
        assert board["schemaVersion"] >= 39, file
        assert board.get("id") is None, f"{file}: an exported dashboard must not carry a database id"


@pytest.mark.parametrize("file", sorted(EXPECTED))
def test_every_panel_has_an_id_title_grid_position_and_queries_on_the_datasource_variable(file: str) -> None:
    board = load_dashboards()[file]
    panels = list(all_panels(board["panels"]))
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)), f"duplicate panel ids: {ids}"
    cells: dict[tuple[int, int], str] = {}
    for panel in panels:
        title = panel.get("title")
        assert isinstance(title, str) and title.strip(), f"panel {panel['id']} has no title"
        grid = panel["gridPos"]
        assert {key: type(grid.get(key)) for key in "hwxy"} == dict.fromkeys("hwxy", int), title
        assert grid["w"] > 0 and grid["h"] > 0 and grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, title
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{title!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = title
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == DATASOURCE, title
        assert panel["targets"], f"{title!r} has no queries"
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, title
            assert target["expr"].strip() and target["refId"], title
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), title


@pytest.mark.parametrize("file", sorted(EXPECTED))
def test_the_template_variables_start_with_a_prometheus_datasource_and_query_through_it(file: str) -> None:
    variables = load_dashboards()[file]["templating"]["list"]
    first = variables[0]
    assert (first["name"], first["type"], first["query"]) == ("datasource", "datasource", "prometheus")
    names = [variable["name"] for variable in variables]
    assert len(names) == len(set(names))
    for variable in variables[1:]:
        assert variable["type"] == "query", variable["name"]
        assert variable["datasource"] == DATASOURCE, variable["name"]
        assert variable_metric_names(query_of(variable)), f"{variable['name']} queries no metric"


def test_rates_use_the_rate_interval_and_quantiles_sum_the_buckets_by_le() -> None:
    for file, board in load_dashboards().items():
        for panel in all_panels(board["panels"]):
            for target in panel.get("targets", []):
                expr = target["expr"]
                where = f"{file}: {panel['title']}: {expr}"
                for window in re.findall(r"\b(?:rate|increase)\(\w+(?:\{[^}]*\})?\[([^\]]+)\]", expr):
                    assert window in ("$__rate_interval", "1h"), where
                if "histogram_quantile" in expr:
                    assert "_bucket" in expr and re.search(r"sum by \(le\b", expr), where


def test_the_dashboards_cover_what_a_pulsar_user_looks_for() -> None:
    used = used_metrics(load_dashboards())
    for wanted in ("herald_broker_messages_in_total", "herald_broker_bytes_out_total",
                   "herald_broker_backlog_messages", "herald_broker_backlog_bytes",
                   "herald_broker_publish_latency_seconds_bucket", "herald_broker_entry_size_bytes_bucket",
                   "herald_broker_dedup_rejections_total", "herald_broker_dispatch_messages_per_second",
                   "herald_broker_redeliveries_total", "herald_broker_cache_hits_total",
                   "herald_storage_add_latency_seconds_bucket", "herald_storage_journal_fsync_latency_seconds_bucket",
                   "herald_storage_journal_group_records_bucket", "herald_storage_disk_free_bytes",
                   "herald_storage_fenced_ledgers", "herald_lookup_live_brokers", "herald_lookup_lookups_total",
                   "herald_lookup_ownership_assignments_total", "herald_proxy_active_connections",
                   "herald_proxy_rejected_connections_total", "herald_proxy_forwarded_bytes_total",
                   "herald_dlq_letters_moved_total", "herald_dlq_moves_retried_total",
                   "herald_dlq_move_failures_total"):
        assert wanted in used, wanted


# ---- against a running standalone ----------------------------------------------------------------

def test_every_metric_a_dashboard_names_is_exported_by_a_running_standalone(exported: Exported) -> None:
    known = exported.names
    unknown = {f"{name} ({', '.join(sorted(where))})"
               for name, where in used_metrics(load_dashboards()).items() if name not in known}
    assert not unknown, f"the dashboards name metrics the standalone does not export: {sorted(unknown)}"


def test_every_metric_a_dashboard_names_has_a_live_series_after_a_produce_consume(exported: Exported) -> None:
    # Failures that did not happen have their series too (pre-initialised to 0 for the known labels).
    live = {s.name for family in exported.families for s in family.samples}
    silent = set(used_metrics(load_dashboards())) - live
    assert not silent, f"no series after a produce-consume: {sorted(silent)}"


def documented_names() -> set[str]:
    """The metric names docs/metrics.md mentions (not the `herald_broker_*` prefixes of its headings)."""
    return set(re.findall(r"\bherald_[a-z0-9_]*[a-z0-9]\b", METRICS_DOC.read_text()))


def test_docs_metrics_lists_every_family_the_standalone_and_the_client_export(exported: Exported) -> None:
    documented = documented_names()
    families = [family for family in [*exported.families, *exported.client_families]
                if family.name.startswith("herald_")]
    missing = {family_name(family) for family in families} - documented
    assert not missing, f"docs/metrics.md does not describe: {sorted(missing)}"
    assert len(families) >= 80


def test_docs_metrics_names_no_metric_herald_does_not_export(exported: Exported) -> None:
    documented = documented_names()
    known = exported.names | exposed_names(exported.client_families)
    assert documented - known == set()


# ---- in a real Prometheus --------------------------------------------------------------------------

# What Grafana puts for its own variables; a dashboard variable is put at its default (All: allValue).
GRAFANA_VARIABLES = {"__rate_interval": "1m", "__interval": "1s", "__range": "1h"}

# Panels whose every query legitimately has no series after this traffic, and why. The test fails if
# one of them has data (the list must stay true) as much as if another panel has none.
EMPTY_ON_THIS_TRAFFIC = {
    # No retry-letter topic: the consumer negatively acknowledges; nothing uses reconsumeLater.
    ("dlq.json", "Retry letters"),
}


def substituted(expr: str, board: dict[str, Any]) -> str:
    values = dict(GRAFANA_VARIABLES)
    for variable in board["templating"]["list"][1:]:
        values[variable["name"]] = variable["allValue"]

    def value(match: re.Match[str]) -> str:
        return values[match.group(1) or match.group(2)]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, expr)


def test_a_query_prometheus_cannot_parse_is_an_error(prometheus: Prometheus) -> None:
    """The validity check below can fail: Prometheus refuses bad PromQL through the same call."""
    with pytest.raises(QueryError, match="bad_data"):
        prometheus.query("sum(rate(herald_broker_messages_in_total[1m])")


def test_every_variable_defaults_to_all_so_panels_work_without_a_namespace_label() -> None:
    # Plain Prometheus scraping a standalone adds no `namespace` label: the default All (.*) matches
    # the series without it, as it matches every namespace's under the Prometheus Operator.
    for file, board in load_dashboards().items():
        for variable in board["templating"]["list"][1:]:
            where = f"{file}: {variable['name']}"
            assert variable["includeAll"] and variable["allValue"] == ".*", where
            assert variable["current"]["value"] == ["$__all"], where
            assert not re.search(r"\bkube_", query_of(variable)), where


def test_every_dashboard_link_keeps_the_variables_and_the_time_range() -> None:
    for file, board in load_dashboards().items():
        assert board["links"], file
        for link in board["links"]:
            assert link["includeVars"] is True and link["keepTime"] is True, file


def test_every_variable_query_finds_values_in_prometheus(exported: Exported, prometheus: Prometheus) -> None:
    empty = []
    for file, board in load_dashboards().items():
        for variable in board["templating"]["list"][1:]:
            call = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", query_of(variable), re.DOTALL)
            assert call is not None, f"{file}: {variable['name']}: not a label_values(<expr>, <label>) query"
            expr, label = substituted(call.group(1), board), call.group(2)
            values = {series[label] for series in prometheus.series(expr) if label in series}
            # namespace: the label the Prometheus Operator adds; a plain scrape has none (All covers it).
            if not values and label != "namespace":
                empty.append(f"{file}: {variable['name']} ({expr})")
    assert not empty, f"variables without values: {empty}"


def test_every_panel_query_is_valid_and_has_data_in_a_real_prometheus(exported: Exported,
                                                                        prometheus: Prometheus) -> None:
    invalid, empty, listed_with_data = [], [], []
    for file, board in load_dashboards().items():
        for panel in all_panels(board["panels"]):
            targets = panel.get("targets", [])
            if not targets:
                continue
            results = []
            for target in targets:
                expr = substituted(target["expr"], board)
                try:
                    results.append(prometheus.query(expr))
                except QueryError as error:
                    invalid.append(f"{file}: {panel['title']}: {error}")
            has_data = any(results)
            listed = (file, panel["title"]) in EMPTY_ON_THIS_TRAFFIC
            if not has_data and not listed:
                empty.append(f"{file}: {panel['title']}")
            if has_data and listed:
                listed_with_data.append(f"{file}: {panel['title']}")
    assert not invalid, "\n".join(invalid)
    assert not empty, f"panels with no data after the traffic: {empty}"
    assert not listed_with_data, f"EMPTY_ON_THIS_TRAFFIC lists panels that have data: {listed_with_data}"


def alert_rules_of(path: Path) -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(path.read_text())["groups"] for rule in group["rules"]]


def test_promtool_accepts_the_chart_s_alert_rules(alert_rules: Path) -> None:
    result = subprocess.run([str(binary(PROMTOOL)), "check", "rules", str(alert_rules)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alert_rules_of(alert_rules))} rules found" in result.stdout


def test_every_alert_is_valid_promql_over_metrics_herald_exports(exported: Exported, prometheus: Prometheus,
                                                                  alert_rules: Path) -> None:
    rules = alert_rules_of(alert_rules)
    assert {rule["alert"] for rule in rules} >= {
        "HeraldBacklogGrowing", "HeraldDeadLettersNotMoved", "HeraldDeadLettersWaitingForReplay",
        "HeraldStorageDiskNearlyFull", "HeraldBrokerNotReady", "HeraldJournalFsyncSlow", "HeraldBrokerLeaseLost"}
    for rule in rules:
        prometheus.query(rule["expr"])  # raises QueryError on invalid PromQL
        unknown = metric_names(rule["expr"]) - exported.names
        assert not unknown, f"{rule['alert']} uses metrics Herald does not export: {sorted(unknown)}"


def test_prometheus_evaluates_every_alert_and_the_dead_letters_one_is_pending(exported: Exported,
                                                                               prometheus: Prometheus,
                                                                               alert_rules: Path) -> None:
    names = {rule["alert"] for rule in alert_rules_of(alert_rules)}
    deadline = time.monotonic() + DEADLINE
    while True:
        rules = [rule for group in prometheus.api("rules")["groups"] for rule in group["rules"]]
        evaluated = {rule["name"]: rule for rule in rules if not rule["lastEvaluation"].startswith("0001")}
        pending = {alert["labels"]["alertname"] for alert in prometheus.api("alerts")["alerts"]}
        if set(evaluated) == names and "HeraldDeadLettersWaitingForReplay" in pending:
            break
        if time.monotonic() > deadline:
            raise AssertionError(f"evaluated {sorted(evaluated)} of {sorted(names)}; alerts {sorted(pending)}")
        time.sleep(0.2)
    errors = {name: rule.get("lastError") for name, rule in evaluated.items() if rule["health"] != "ok"}
    assert not errors, errors
    # A healthy standalone under this traffic: its one broker is live, its disk is not full.
    assert not pending & {"HeraldBrokerNotReady", "HeraldStorageDiskNearlyFull", "HeraldStorageRefusingAdds"}
