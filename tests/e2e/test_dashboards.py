"""The Grafana dashboards (charts/herald/dashboards/*.json) and docs/metrics.md against what Herald
really exports: every dashboard is well formed (ids, titles, grid positions, the `datasource`
variable on every panel and query), and every metric a panel or template variable names is one a
running `herald standalone` (dlq-worker on) serves after a produce-consume that makes dead letters
through the proxy. docs/metrics.md lists every family that scrape holds, and names no other."""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from herald.client import AsyncClient, ConsumerType, DeadLetterPolicy, InitialPosition
from herald.client.metrics import ClientMetrics
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import ROOT, StandaloneProcess, running_standalone
from tests.helpers import unique_topic

DASHBOARDS = ROOT / "charts" / "herald" / "dashboards"
METRICS_DOC = ROOT / "docs" / "metrics.md"
EXPECTED = {"overview.json", "topic.json", "broker.json", "storage.json", "proxy.json", "dlq.json"}
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
DEADLINE = 30.0
LETTERS = 5

# ---- PromQL: the metric names an expression selects ----------------------------------------------

_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<comment>\#[^\n]*)
  | (?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)
  | (?P<variable>\$\{[^}]*\}|\$\w+|\[\[[\w:.]+\]\])
  | (?P<number>0[xX][0-9a-fA-F]+
      |(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?(?:(?:ms|[smhdwy])(?:\d+(?:ms|[smhdwy]))*)?)
  | (?P<name>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<punct>=~|!~|!=|==|<=|>=|.)
""", re.VERBOSE | re.DOTALL)

# Followed by a parenthesised list of label names (group_left/right may have none).
LABEL_LIST_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
KEYWORDS = {"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan"}
# Aggregations may be followed by `by (...)` before their parenthesis: not always a call at once.
AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk",
                "topk", "quantile", "limitk", "limit_ratio"}


def _tokens(expr: str) -> list[tuple[str, str]]:
    found = []
    for match in _TOKEN.finditer(expr):
        kind = match.lastgroup
        assert kind is not None
        if kind not in ("space", "comment"):
            found.append((kind, match.group()))
    return found


def _closing(tokens: list[tuple[str, str]], start: int, opening: str, closing: str) -> int:
    """The index of the token closing the bracket opened at `start`."""
    depth = 0
    for index in range(start, len(tokens)):
        if tokens[index] == ("punct", opening):
            depth += 1
        elif tokens[index] == ("punct", closing):
            depth -= 1
            if depth == 0:
                return index
    raise ValueError(f"unbalanced {opening!r} in {' '.join(text for _, text in tokens)!r}")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: its bare identifiers, less functions (a name
    followed by a parenthesis), aggregations, keywords, the label names of `by (...)` and the like,
    label matchers inside `{...}` (but a `__name__="x"` matcher's x), ranges and subqueries `[...]`,
    strings, numbers, durations and Grafana variables."""
    tokens = _tokens(expr)
    names: set[str] = set()
    index = 0
    while index < len(tokens):
        kind, text = tokens[index]
        following = tokens[index + 1] if index + 1 < len(tokens) else ("", "")
        if (kind, text) == ("punct", "{"):
            end = _closing(tokens, index, "{", "}")
            matchers = tokens[index + 1:end]
            for at, (matcher_kind, matcher) in enumerate(matchers[:-2]):
                if (matcher_kind, matcher) == ("name", "__name__") and matchers[at + 1] == ("punct", "=") \
                        and matchers[at + 2][0] == "string":
                    names.add(matchers[at + 2][1][1:-1])
            index = end + 1
            continue
        if (kind, text) == ("punct", "["):  # a range or subquery: durations, variables and ':'
            index = _closing(tokens, index, "[", "]") + 1
            continue
        if kind == "name":
            word = text.lower()
            if word in LABEL_LIST_KEYWORDS:
                index = _closing(tokens, index + 1, "(", ")") + 1 if following == ("punct", "(") else index + 1
                continue
            if word not in KEYWORDS and word not in AGGREGATIONS and following != ("punct", "("):
                names.add(text)
        index += 1
    return names


def variable_metric_names(query: str) -> set[str]:
    """The metric names of a Grafana Prometheus variable query: label_values(<expr>, <label>),
    query_result(<expr>); label_values(<label>), label_names() and metrics(<regex>) name none."""
    query = query.strip()
    call = re.fullmatch(r"(\w+)\s*\((.*)\)", query, re.DOTALL)
    if call is None:
        return metric_names(query)
    function, arguments = call.groups()
    if function == "label_values":
        expr, comma, _ = arguments.rpartition(",")
        return metric_names(expr) if comma else set()
    if function == "query_result":
        return metric_names(arguments)
    if function in ("label_names", "metrics"):
        return set()
    return metric_names(query)


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
def exported(with_dlq_worker: StandaloneProcess) -> Exported:
    return asyncio.run(produce_dead_letters(with_dlq_worker))


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
    # Families a normal run leaves without series (failures that did not happen) are allowed.
    idle = {"herald_dlq_move_failures_total", "herald_proxy_upstream_reconnects_total",
            "herald_proxy_upstream_failures_total"}
    live = {s.name for family in exported.families for s in family.samples}
    silent = set(used_metrics(load_dashboards())) - live - idle
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
